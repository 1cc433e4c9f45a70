"""A content-addressed SQLite call cache that wraps any engine ("never pay twice").

The key of a call is `request.content_hash(engine.engine_id)`: engine and model identity
plus every field of the request (messages, sampling settings, seed, constraint). A batch is
looked up at once; only the misses go to the inner engine, in ONE batch, with duplicates
inside the batch sent once. Responses that report an error are never stored, so a re-run
retries them. One SQLite file (WAL mode) can be shared by several engines and threads of a
process: database access is serialised by a lock, and a request already in flight in
another thread is waited for instead of being sent again.

Fresh responses are written in small groups, one transaction each (at 2000 responses a
second, a transaction per response would make the cache the client's limit): a group is
committed when it holds `FLUSH_ROWS` responses or its oldest has waited `FLUSH_SECONDS`,
and whatever is pending when the batch ends or fails. So a SIGKILL loses at most the
responses of the group still open (under `FLUSH_ROWS`, at most `FLUSH_SECONDS` old) besides
the requests in flight; `resume` pays for those again, nothing else.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import EngineError
from .base import BaseEngine, BatchReport, Engine, ProgressCallback, check_batch_size
from .types import GenerationRequest, GenerationResponse

__all__ = ["CachedEngine"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key        TEXT PRIMARY KEY,
    engine_id  TEXT NOT NULL,
    request    TEXT NOT NULL,
    response   TEXT NOT NULL,
    created_at REAL NOT NULL,
    paid       INTEGER NOT NULL DEFAULT 1
)
"""
# `paid` counts how often the response for a key was generated and stored: 1 unless the
# same call was paid for twice (which the cache exists to prevent; tests assert it).
_LOOKUP_CHUNK = 500  # stays below SQLite's limit on bound variables
FLUSH_ROWS = 64
"""A group of fresh responses is committed when it holds this many..."""
FLUSH_SECONDS = 0.2
"""...or when its oldest response has waited this long (what a SIGKILL can lose, at most)."""

_Row = tuple[str, GenerationRequest, GenerationResponse]


class _WriteGroup:
    """Fresh responses waiting for their transaction: committed at `FLUSH_ROWS`, by a timer
    `FLUSH_SECONDS` after the first one arrived, and by `flush()` at the end of a batch."""

    def __init__(self, store: Callable[[list[_Row]], None]) -> None:
        self._store = store
        self._rows: list[_Row] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def add(self, row: _Row) -> None:
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= FLUSH_ROWS
            if not full and self._timer is None:
                self._timer = threading.Timer(FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if rows:  # under the lock: groups are committed in arrival order
                self._store(rows)


class CachedEngine(BaseEngine):
    """Wraps `engine`. Counters: `hits` (requests answered from the cache, including ones
    another thread was computing), `misses` (requests actually sent to the inner engine),
    `deduplicated` (in-batch copies that rode along with a miss). Their sum is the number
    of requests asked for."""

    name = "cached"
    thread_safe = True  # threads share the file; a key in flight in one is awaited by the others

    def __init__(self, engine: Engine, path: Path | str) -> None:
        super().__init__(engine.engine_id)
        self.engine = engine
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self.deduplicated = 0
        self._db_lock = threading.Lock()  # the connection, the counters and `_inflight`
        self._inflight: dict[str, threading.Event] = {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path), timeout=60.0, check_same_thread=False, isolation_level=None
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(calls)")}
            if "paid" not in columns:  # a cache written before the column existed
                self._conn.execute("ALTER TABLE calls ADD COLUMN paid INTEGER NOT NULL DEFAULT 1")
        except (sqlite3.Error, OSError) as exc:
            raise EngineError(f"{self.path}: cannot open the call cache ({exc})") from exc

    # ------------------------------------------------------------------ public

    def stats(self) -> dict[str, Any]:
        """Counters of this wrapper plus the number of stored calls in the file."""
        with self._db_lock:
            entries = self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
            return {
                "engine_id": self.engine_id,
                "hits": self.hits,
                "misses": self.misses,
                "deduplicated": self.deduplicated,
                "entries": int(entries),
                "path": str(self.path),
            }

    # ------------------------------------------------------------------ internals

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """Answer from the cache where possible; send the rest to the engine in one batch.

        Each fresh response is stored within `FLUSH_SECONDS` of the engine handing it over
        (in groups, see the module docstring), so a run killed mid-batch keeps nearly every
        call it finished. The responses are reported (`on_response`) when the whole batch is
        done."""
        progress = report.advance
        keys = [r.content_hash(self.engine_id) for r in requests]
        found = self._lookup(set(keys))
        results: list[GenerationResponse | None] = [None] * len(requests)
        pending: dict[str, GenerationRequest] = {}
        for i, (key, request) in enumerate(zip(keys, requests)):
            if key in found:
                results[i] = found[key].model_copy(update={"cached": True})
            else:
                pending.setdefault(key, request)
        n_hits = sum(r is not None for r in results)
        with self._db_lock:
            self.hits += n_hits
        if n_hits:
            progress(n_hits)

        fresh = self._compute(pending, progress) if pending else {}
        n_copies = 0
        for i, key in enumerate(keys):
            if results[i] is None:
                results[i] = fresh[key].model_copy()
                n_copies += 1
        n_copies -= len(pending)
        if n_copies:
            with self._db_lock:
                self.deduplicated += n_copies
            progress(n_copies)
        return [r for r in results if r is not None]

    def _release(self) -> None:
        """Close the inner engine and the database connection."""
        try:
            self.engine.close()
        finally:
            with self._db_lock:
                self._conn.close()

    def _compute(
        self, pending: dict[str, GenerationRequest], progress: ProgressCallback
    ) -> dict[str, GenerationResponse]:
        """Send the keys nobody else is computing; wait for the others, then re-check."""
        mine: dict[str, GenerationRequest] = {}
        theirs: dict[str, threading.Event] = {}
        with self._db_lock:
            for key in pending:
                event = self._inflight.get(key)
                if event is None:
                    self._inflight[key] = threading.Event()
                    mine[key] = pending[key]
                else:
                    theirs[key] = event
        out: dict[str, GenerationResponse] = {}
        claimed = list(mine)
        try:
            # Another thread may have stored a key between our lookup and our claim.
            late = self._lookup(set(mine)) if mine else {}
            if late:
                out.update({k: r.model_copy(update={"cached": True}) for k, r in late.items()})
                with self._db_lock:
                    self.hits += len(late)
                progress(len(late))
                mine = {k: r for k, r in mine.items() if k not in late}
            if mine:
                out.update(self._send(mine, progress))
        finally:  # stored (or failed): wake the threads waiting for our keys
            self._release_claims(claimed)
        if theirs:
            for event in theirs.values():
                event.wait()
            found = self._lookup(set(theirs))
            out.update({k: r.model_copy(update={"cached": True}) for k, r in found.items()})
            leftover = {k: pending[k] for k in theirs if k not in found}
            with self._db_lock:
                self.hits += len(found)
            if found:
                progress(len(found))
            if leftover:  # the other thread failed or got an error response: send ourselves
                out.update(self._send(leftover, progress))
        return out

    def _send(
        self, batch: dict[str, GenerationRequest], progress: ProgressCallback
    ) -> dict[str, GenerationResponse]:
        keys = list(batch)
        with self._db_lock:
            self.misses += len(keys)
        stored: set[int] = set()
        group = _WriteGroup(self._store)

        def store_soon(index: int, response: GenerationResponse) -> None:
            group.add((keys[index], batch[keys[index]], response))
            stored.add(index)

        try:
            responses = self.engine.generate([batch[k] for k in keys], progress, on_response=store_soon)
        finally:  # a failed batch keeps every response that arrived
            group.flush()
        check_batch_size(self.engine_id, len(responses), len(keys))
        # Engines that do not report responses one by one are stored here, in one go.
        self._store([(k, batch[k], r) for i, (k, r) in enumerate(zip(keys, responses)) if i not in stored])
        return dict(zip(keys, responses))

    def _release_claims(self, keys: Any) -> None:
        """Drop our claim on `keys` and wake any thread waiting for them."""
        with self._db_lock:
            for key in keys:
                event = self._inflight.pop(key, None)
                if event is not None:
                    event.set()

    def _lookup(self, keys: set[str]) -> dict[str, GenerationResponse]:
        found: dict[str, GenerationResponse] = {}
        ordered = sorted(keys)
        with self._db_lock:
            rows: list[tuple[str, str]] = []
            for start in range(0, len(ordered), _LOOKUP_CHUNK):
                chunk = ordered[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows.extend(
                    self._conn.execute(
                        f"SELECT key, response FROM calls WHERE key IN ({marks})", chunk
                    ).fetchall()
                )
        for key, blob in rows:
            try:
                found[key] = GenerationResponse.model_validate_json(blob)
            except ValueError:  # a damaged row is a miss, and gets overwritten
                continue
        return found

    def _store(self, items: list[_Row]) -> None:
        now = time.time()
        rows = [
            (
                key,
                self.engine_id,
                request.model_dump_json(),
                response.model_dump_json(exclude={"cached"}),
                now,
            )
            for key, request, response in items
            if response.finish_reason != "error"
        ]
        if not rows:
            return
        with self._db_lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT INTO calls (key, engine_id, request, response, created_at)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET response = excluded.response,"
                    " created_at = excluded.created_at, paid = calls.paid + 1",
                    rows,
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
