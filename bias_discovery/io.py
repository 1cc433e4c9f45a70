"""File helpers shared by every module: atomic writes, JSONL reading with line numbers, and
output folders written through a staging folder (`staged_output`, `staged_files`).

Atomic means: write to a temporary file in the same directory, fsync, then rename over the
target. A reader (or a killed run) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import BiasDiscoveryError, DataError, OutputError, json_problem


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write `text` to `path` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def is_atomic_temporary(path: Path) -> bool:
    """Whether `path` is a temporary file of `atomic_write_text` (`.NAME.XXXXXXXX.tmp`)."""
    name = path.name
    return name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 3


def remove_orphaned_temporaries(root: Path | str) -> list[str]:
    """Delete the temporary files that writes killed before their rename left under `root`
    (SIGKILL skips the cleanup above); their targets are untouched. Only for a directory whose
    writer is known to be gone (a run under its lock). Returns the removed paths, relative."""
    root = Path(root)
    removed = []
    for path in sorted(root.rglob(".*.tmp")):
        if path.is_file() and is_atomic_temporary(path):
            path.unlink(missing_ok=True)
            removed.append(str(path.relative_to(root)))
    return removed


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj


def atomic_write_json(path: Path | str, obj: Any, indent: int | None = 2) -> None:
    """Write one JSON document atomically. Pydantic models are dumped in JSON mode."""
    text = json.dumps(_to_jsonable(obj), ensure_ascii=False, indent=indent)
    atomic_write_text(path, text + "\n")


def atomic_write_jsonl(path: Path | str, rows: Iterable[Any]) -> None:
    """Write a JSONL file atomically, one JSON object per line."""
    lines = [json.dumps(_to_jsonable(r), ensure_ascii=False) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_utf8(
    path: Path | str, *, error: type[BiasDiscoveryError] = DataError, what: str = "file", hint: str = ""
) -> str:
    """The text of `path`; otherwise `error` naming the file, and for a byte that is not UTF-8
    its line and column (followed by `hint`, e.g. what the file should be)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column})"
            + (f"; {hint}" if hint else "")
        ) from None


def scan_jsonl(path: Path | str) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield (line_number, object, None) for each non-blank line that is a JSON object, and
    (line_number, None, problem) for one that is not (not UTF-8, malformed JSON, not an object),
    the problem naming the file and line. A missing or unreadable file raises DataError."""
    path = Path(path)
    try:
        handle = path.open("rb")  # decoded line by line: a bad byte names its line
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with handle:
        for line_number, raw in enumerate(handle, start=1):
            where = f"{path}:{line_number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield (
                    line_number,
                    None,
                    f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                )
                continue
            if not line.strip(" \t\r\n"):  # JSON's whitespace: any other character is content
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield line_number, None, f"{where}: malformed JSON ({json_problem(exc, line=False)})"
                continue
            except RecursionError:
                yield line_number, None, f"{where}: malformed JSON (nested too deeply)"
                continue
            if not isinstance(obj, dict):
                yield line_number, None, f"{where}: expected a JSON object, got {type(obj).__name__}"
                continue
            yield line_number, obj, None


def iter_jsonl(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line_number, object) for each non-blank line; a bad line raises DataError naming it."""
    for line_number, obj, problem in scan_jsonl(path):
        if obj is None:
            raise DataError(problem or f"{path}:{line_number}: unreadable line")
        yield line_number, obj


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """Read a whole JSONL file (see `iter_jsonl` for the errors)."""
    return [obj for _, obj in iter_jsonl(path)]


def probe_writable(directory: Path | str, *, what: str) -> None:
    """Prove that files can be written in `directory` before any work is spent on them: create,
    write and remove a probe file there (in its nearest existing ancestor when it does not exist
    yet: that is where it will be created). OutputError naming `what` and the cause otherwise."""
    target = Path(directory)
    probe_dir = target
    while not os.path.lexists(probe_dir) and probe_dir.parent != probe_dir:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise OutputError(f"{what} {target}: {probe_dir} is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".bias-discovery-probe-", dir=probe_dir)
        try:
            os.write(fd, b"probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        raise OutputError(
            f"{what} {target} is not writable: cannot create a file in {probe_dir} ({exc.strerror or exc})"
        ) from None


def check_output_dir(
    out: Path, *, overwrite: bool, protect: Sequence[Path] = (), error: type[BiasDiscoveryError] = OutputError
) -> None:
    """Refuse an --out that exists and is not an empty directory (unless `overwrite`), one
    that is or contains a protected path (the run directory: --overwrite must never delete it),
    and one whose parent cannot be written (`staged_output` writes and renames there): proved
    with a probe file before any model call is paid for. A refusal raises `error` (the caller's
    own error type: `ExportError` for the exports), a folder that cannot be written OutputError."""
    out_resolved = out.resolve()
    for path in protect:
        p = path.resolve()
        if out_resolved == p or out_resolved in p.parents:
            raise error(f"`out` {out} is or contains {path}; pick another output directory")
    if out.is_symlink() or out.exists():
        if not out.is_dir():
            raise error(f"`out` {out} exists and is not a directory")
        if any(out.iterdir()) and not overwrite:
            raise error(
                f"`out` {out} exists and is not empty; pass `overwrite` to replace it, or pick another directory"
            )
    probe_writable(out.absolute().parent, what=f"`out` {out}: its folder")


@contextmanager
def staged_output(
    out: Path, *, overwrite: bool, protect: Sequence[Path] = (), error: type[BiasDiscoveryError] = OutputError
) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `out`; on success it replaces `out`.

    On any exception the temporary directory is removed and `out` is left as it was. An
    existing `out` (empty, or any with `overwrite`) is moved aside, the new one renamed in,
    and the old one deleted; if the rename fails, the old one is put back.
    """
    check_output_dir(out, overwrite=overwrite, protect=protect, error=error)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_dir(out.parent, f".{out.name}.tmp-")
    try:
        yield tmp
        check_output_dir(out, overwrite=overwrite, protect=protect, error=error)
        if out.exists():
            old = out.parent / f".{out.name}.old-{_short_id()}"
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def staged_files(directory: Path, names: Sequence[str]) -> Iterator[Path]:
    """Yield a fresh staging folder inside `directory`; on success move each of `names` from it
    into `directory`, in that order (a reader sees the old file or the new one, file by file:
    put the file that marks a complete set last). The staging folder is removed either way;
    the rest of `directory` (a call cache, settings) is left alone."""
    stage = _fresh_dir(directory, ".stage-")
    try:
        yield stage
        for name in names:
            os.replace(stage / name, directory / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _short_id() -> str:
    return uuid.uuid4().hex[:8]


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """A new, empty folder ``PREFIX<8 hex>`` in `parent`: a staging place of one writer."""
    path = parent / f"{prefix}{_short_id()}"
    path.mkdir()
    return path
