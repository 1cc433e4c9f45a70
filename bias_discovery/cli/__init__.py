"""The `bias-discovery` command line. Thin: parse options, call the library, print results.

One module per command group, each registering its commands on the one Typer `app` of
`common` (which also holds the consoles, `fail` and error formatting). Heavy modules are
imported inside the commands, so the CLI starts fast.
"""

from __future__ import annotations

import os

from .common import app

# Importing a command module registers its commands; `--help` lists them in this order, so
# keep it (not alphabetical).
# isort: off
from . import judge  # noqa: F401,E402  judge
from . import audit  # noqa: F401,E402  audit
from . import loop  # noqa: F401,E402  run, resume, status
from . import browse  # noqa: F401,E402  library show/diff, report, view
from . import review  # noqa: F401,E402  review
from . import replicate  # noqa: F401,E402  replicate
from . import matrix  # noqa: F401,E402  matrix
from . import export  # noqa: F401,E402  export judgebench-pro/apply-annotations/dpo
from . import check  # noqa: F401,E402  check
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()
