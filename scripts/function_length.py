"""The function-length gate: no function or method in bias_discovery/ is over 100 lines
(signature, docstring and body; a nested function counts within its parent too). Run by
scripts/lint.sh and tests/test_house.py.

    python scripts/function_length.py [--limit 100] [--top 5] [PATH ...]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

LIMIT = 100
"""The longest a function may be, in lines (CONTRIBUTING.md, "No function over 100 lines")."""


def function_lengths(root: Path) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function under `root`, longest first."""
    rows = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                rows.append(((node.end_lineno or node.lineno) - start + 1, f"{path}:{node.lineno} {node.name}"))
    return sorted(rows, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("bias_discovery")])
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--top", type=int, default=3, help="also print the N longest functions")
    args = parser.parse_args(argv)
    rows = sorted((r for p in args.paths for r in function_lengths(p)), reverse=True)
    over = [r for r in rows if r[0] > args.limit]
    for lines, where in over:
        print(f"{where}: {lines} lines (limit {args.limit}): split it into named steps", file=sys.stderr)
    print(
        f"function length: {len(rows)} functions, {len(over)} over {args.limit} lines; longest: "
        + "; ".join(f"{where} ({lines})" for lines, where in rows[: args.top])
    )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
