"""Side by side with the official BiasScope code: the same model, data and sampling, one run.

    python benchmarks/vs_biasscope.py --peer DIR --data-dir DIR --json OUT [--reps 2] [--n-target N] [--n-test N]

The entry of the package `benchmarks/biasscope_bench` (what runs, how it is metered and what the
record holds: its docstring, and docs/benchmarks/vs_biasscope.md). Python puts this directory
first on sys.path, which is how `provenance` and the package are found.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from biasscope_bench.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
