"""The `bias-discovery` command line. Thin: parse options, call the library, print results.

One module per command group, each registering its commands on the one Typer `app` of
`common` (which also holds the consoles, `fail` and error formatting). The imports below
register them in the order `--help` lists them; heavy modules are imported inside the
commands, so the CLI starts fast.
"""

from __future__ import annotations

import os

from .common import app
from . import judge, loop, browse, export  # noqa: E402,F401  (registers the commands, in this order)

__all__ = ["app", "main"]


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()
