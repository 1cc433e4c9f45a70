"""`python -m bias_discovery.cli ...`, the same as the `bias-discovery` console script."""

from . import main

main()
