"""The commit-msg gate: a commit's subject (its first line) is at most 72 characters, and a
longer message puts its detail in the body after one blank line (CONTRIBUTING.md, "Commits").
Run by .pre-commit-config.yaml on the message file; `--range A..B` checks existing commits.

    python scripts/commit_subject.py .git/COMMIT_EDITMSG
    python scripts/commit_subject.py --range origin/main..HEAD
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with a commit message (comment lines, as git strips them, ignored)."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    found = []
    if len(lines[0]) > MAX_SUBJECT:
        found.append(
            f"the subject is {len(lines[0])} characters (at most {MAX_SUBJECT}): {lines[0][:MAX_SUBJECT]}...; "
            "put the detail in the body"
        )
    if len(lines) > 1 and lines[1].strip():
        found.append("the subject and the body are separated by one blank line")
    return found


def main(argv: list[str]) -> int:
    if argv[:1] == ["--range"] and len(argv) == 2:
        hashes = subprocess.run(["git", "rev-list", argv[1]], capture_output=True, text=True, check=True).stdout.split()
        messages = {
            h: subprocess.run(["git", "log", "-1", "--format=%B", h], capture_output=True, text=True, check=True).stdout
            for h in hashes
        }
    elif len(argv) == 1:
        messages = {argv[0]: Path(argv[0]).read_text(encoding="utf-8")}
    else:
        print(__doc__, file=sys.stderr)
        return 2
    bad = {name: found for name, message in messages.items() if (found := problems(message))}
    for name, found in bad.items():
        print(f"{name[:12]}: {'; '.join(found)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
