"""What every benchmark record says about where it was measured: the CPU's model name and the
commit of the code (with a mark when the tree had uncommitted changes), so a figure on the
benchmarks page can name its machine and commit. Imported by the benchmark scripts, which
`python benchmarks/NAME.py` runs with this directory first on sys.path."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (e.g. "AMD EPYC"); elsewhere what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(directory: Path = REPO) -> str:
    """HEAD of the checkout at `directory`, with " (with uncommitted changes)" when its tracked
    files differ from it; "unknown (not a git checkout)" when git cannot say."""
    try:
        head = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
