"""The `bias-discovery` command line. Thin: parse options, call the library, print results.

One module per command group, each registering its commands on the one Typer `app` of
`_common` (which also holds the consoles, `fail` and error formatting). Only `main` (the console
script), `app` and `leave` are public: every module here has a leading underscore. Heavy modules are
imported inside the commands, so the CLI starts fast.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

from ._common import app

# Importing a command module registers its commands; `--help` lists them in this order, so
# keep it (not alphabetical).
# isort: off
from . import _judge  # noqa: F401,E402  judge
from . import _audit  # noqa: F401,E402  audit
from . import _loop  # noqa: F401,E402  run, resume, status
from . import _browse  # noqa: F401,E402  library show/diff, report, view
from . import _review  # noqa: F401,E402  review
from . import _replicate  # noqa: F401,E402  replicate
from . import _matrix  # noqa: F401,E402  matrix
from . import _export  # noqa: F401,E402  export judgebench-pro/apply-annotations/dpo
from . import _check  # noqa: F401,E402  check
from . import _correct  # noqa: F401,E402  correct
# isort: on

__all__ = ["app", "leave", "main"]


def main() -> None:
    """The console script: run the command, then leave without the interpreter's teardown.

    Why `os._exit`: after a command has closed its engines, files and connections, what is
    left are threads of C extensions (torch's and faiss's OpenMP pools, tokenizers) whose
    teardown at interpreter exit runs in an order nothing controls, and which crashed a
    finished run now and then (rc -11 after the summary was printed). Python-level exit
    handlers still run (`atexit._run_exitfuncs`: the shared event loop is stopped and joined,
    logging flushed); the C-level teardown is skipped. A bug (an exception the CLI does not
    turn into a message) keeps the ordinary exit and its traceback. A Ctrl-C that a callback
    swallowed is sent again (`interrupts`), so every command stops on the first one."""
    from ..interrupts import redeliver_lost_interrupts

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        with redeliver_lost_interrupts():
            app()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)


def leave(code: object) -> NoReturn:
    """Flush, run the exit handlers, and end the process with `code` (SystemExit's rules: None
    is 0, an int is itself, anything else is printed and is 1)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(status)
