"""A content-addressed SQLite call cache that wraps any engine ("never pay twice").

The key of a call is `request.content_hash(engine.engine_id)`: engine and model identity
plus every field of the request (messages, sampling settings, seed, constraint). A batch is
looked up at once; only the misses go to the inner engine, in ONE batch, with duplicates
inside the batch sent once. A request submitted on its own (`submit`, the streamed loop) is
looked up and, on a miss, submitted to the inner engine alone. Responses that report an error
are never stored, so a re-run retries them. One SQLite file (WAL mode) can be shared by
several engines and threads of a process: database access is serialised by a lock, and a
request already in flight (in another thread's batch, or submitted) is waited for instead of
being sent again: its *claim* (a Future) holds the response from the moment it arrives until
it is committed, so a copy asked for in between is answered from it, never paid again.

Fresh responses are written in small groups, one transaction each (at 2000 responses a
second, a transaction per response would make the cache the client's limit): a group is
committed when it holds `FLUSH_ROWS` responses or its oldest has waited `FLUSH_SECONDS`,
and whatever is pending when the batch ends or fails (submitted requests share one group of
the engine's, committed the same way and when the engine closes). So a SIGKILL loses at most the
responses of the group still open (under `FLUSH_ROWS`, at most `FLUSH_SECONDS` old) besides
the requests in flight; `resume` pays for those again, nothing else.

**The ledger.** A caller that says who pays (`generate(..., payer=...)`, `submit(..., payer=...)`:
the meter of a role, with its price) gets every fresh response it paid for booked in the
`spend` table, in the same transaction as the response: so what a run has paid survives a
failed batch or a SIGKILL exactly as its calls do (`read_spend`), and a resumed run counts its
budget from there, never paying past it by more than the requests in flight when it stopped.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .aio import FREEZE_HEAP_FROM, frozen_heap
from .base import BaseEngine, BatchReport, Engine, ProgressCallback, ResponseCallback, check_batch_size, flush
from .budget import Payer, Spend
from .types import GenerationRequest, GenerationResponse

__all__ = ["CachedEngine", "read_spend"]

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
_LEDGER = """
CREATE TABLE IF NOT EXISTS spend (
    id                INTEGER PRIMARY KEY,
    key               TEXT NOT NULL,
    role              TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    usd               REAL NOT NULL,
    created_at        REAL NOT NULL
)
"""
# One row per paid call (the ledger, module docstring), written with the call's own row.
# `paid` counts how often the response for a key was generated and stored: 1 unless the
# same call was paid for twice (which the cache exists to prevent; tests assert it).
_LOOKUP_CHUNK = 500  # stays below SQLite's limit on bound variables
FLUSH_ROWS = 64
"""A group of fresh responses is committed when it holds this many..."""
FLUSH_SECONDS = 0.2
"""...or when its oldest response has waited this long (what a SIGKILL can lose, at most)."""

_Row = tuple[str, GenerationRequest, GenerationResponse, Payer | None]
Claim = Future  # Future[GenerationResponse | None]
"""A key in flight: its response once it arrives (None: the request failed)."""


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
        self._inflight: dict[str, Claim] = {}
        """Keys being computed, by a batch (until it ends) or a submission (until its
        response is committed)."""
        self._submitted = _WriteGroup(self._store_submitted)
        self._paying = threading.local()
        """The payer of the batch this thread is generating (`generate(..., payer=...)`)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            self._conn.execute(_LEDGER)
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

    def known(self, requests: Sequence[GenerationRequest]) -> list[bool]:
        """Whether the cache holds each request's response now (a budget does not count those)."""
        keys = [r.content_hash(self.engine_id) for r in requests]
        found = self._lookup(set(keys))
        return [key in found for key in keys]

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response: ResponseCallback | None = None,
        payer: Payer | None = None,
    ) -> list[GenerationResponse]:
        """`BaseEngine.generate`; the fresh responses are booked to `payer` in the ledger (None:
        not booked). Each fresh response is reported (`on_response`) as it arrives, so a caller
        whose batch fails still sees what was paid."""
        self._paying.payer = payer
        try:
            return super().generate(requests, progress, on_response)
        finally:
            self._paying.payer = None

    def submit(self, request: GenerationRequest, payer: Payer | None = None) -> Future[GenerationResponse]:
        """One request: from the cache, from the claim of the same request in flight, or
        submitted to the inner engine alone (stored within `FLUSH_SECONDS` of its arrival,
        booked to `payer` in the ledger)."""
        if self._closed:
            raise EngineError(f"the {self.name} engine is closed")
        key = request.content_hash(self.engine_id)
        answer: Future[GenerationResponse] = Future()
        with self._db_lock:  # the lookup and the claim together: a commit cannot slip between
            found = self._lookup_locked({key}).get(key)
            claim = self._inflight.get(key) if found is None else None
            mine = found is None and claim is None
            if found is not None:
                self.hits += 1
            elif mine:
                claim = self._inflight[key] = Future()
                self.misses += 1
        if found is not None:
            answer.set_result(found.model_copy(update={"cached": True}))
            return answer
        assert claim is not None
        if not mine:  # computed elsewhere: its response, or send it ourselves if that failed
            claim.add_done_callback(lambda done: self._answer_from_claim(done, request, answer, payer))
            return answer
        try:
            sent = self.engine.submit(request)
        except BaseException:
            self._settle(key, claim, None)
            raise
        sent.add_done_callback(lambda done: self._arrived(key, request, claim, done, answer, payer))
        # a caller that gives up drops the request if it has not started (a response that
        # arrives anyway is still stored: it is paid for)
        answer.add_done_callback(lambda done: sent.cancel() if done.cancelled() else None)
        return answer

    def flush(self) -> None:
        """Commit the submissions' responses now (and the inner engine's, if it holds any)."""
        self._submitted.flush()
        flush(self.engine)

    # ------------------------------------------------------------------ internals

    def _arrived(
        self,
        key: str,
        request: GenerationRequest,
        claim: Claim,
        sent: Future[GenerationResponse],
        answer: Future[GenerationResponse],
        payer: Payer | None,
    ) -> None:
        """A submitted request's response: queued for its commit (the claim answers copies
        until then), and handed on."""
        if sent.cancelled() or sent.exception() is not None:
            self._settle(key, claim, None)
            _pass_on(sent, answer)
            return
        response = sent.result()
        if response.finish_reason == "error":  # never stored: copies asked later send again
            self._settle(key, claim, response)
        else:
            claim.set_result(response)  # released by `_store_submitted` once committed
            self._submitted.add((key, request, response, payer))
        _resolve(answer, response.model_copy())

    def _answer_from_claim(
        self, claim: Claim, request: GenerationRequest, answer: Future[GenerationResponse], payer: Payer | None
    ) -> None:
        response = claim.result()
        if response is not None and response.finish_reason != "error":
            with self._db_lock:
                self.hits += 1
            _resolve(answer, response.model_copy(update={"cached": True}))
            return
        if answer.cancelled():
            return
        try:  # it failed there: this one goes out itself
            again = self.submit(request, payer)
        except BaseException as exc:
            _resolve(answer, exception=exc)
            return
        again.add_done_callback(lambda done: _pass_on(done, answer))

    def _settle(self, key: str, claim: Claim, response: GenerationResponse | None) -> None:
        """End a claim that will not be committed (a failure, an error response)."""
        with self._db_lock:
            if self._inflight.get(key) is claim:
                del self._inflight[key]
        if not claim.done():
            claim.set_result(response)

    def _store_submitted(self, rows: list[_Row]) -> None:
        """Commit submitted responses, then end their claims (later copies read the file)."""
        self._store(rows)
        with self._db_lock:
            for key, *_ in rows:
                claim = self._inflight.get(key)
                if claim is not None and claim.done():
                    del self._inflight[key]

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        """Answer from the cache where possible; send the rest to the engine in one batch.

        Each fresh response is stored within `FLUSH_SECONDS` of the engine handing it over
        (in groups, see the module docstring), so a run killed mid-batch keeps nearly every
        call it finished. The responses are reported (`on_response`) when the whole batch is
        done. A large batch runs with the earlier heap left out of the garbage collector's scans
        (`aio.frozen_heap`): its keys, claims and copies would otherwise make the collector
        rescan the whole heap several times before the first request is sent."""
        with frozen_heap() if len(requests) >= FREEZE_HEAP_FROM else nullcontext():
            return self._answer(requests, report)

    def _answer(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
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

        payer = getattr(self._paying, "payer", None)
        fresh = self._compute(pending, progress, _reporter(keys, results, report), payer) if pending else {}
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
        """Close the inner engine, commit what submissions left, close the database."""
        try:
            self.engine.close()
        finally:
            try:
                self._submitted.flush()
            finally:
                with self._db_lock:
                    self._conn.close()

    def _compute(
        self,
        pending: dict[str, GenerationRequest],
        progress: ProgressCallback,
        arrived: Callable[[str, GenerationResponse], None],
        payer: Payer | None,
    ) -> dict[str, GenerationResponse]:
        """Send the keys nobody else is computing; take the others' responses from their
        claims (waiting for them), and send those that failed there."""
        mine: dict[str, GenerationRequest] = {}
        theirs: dict[str, Claim] = {}
        with self._db_lock:
            for key in pending:
                claim = self._inflight.get(key)
                if claim is None:
                    self._inflight[key] = Future()
                    mine[key] = pending[key]
                else:
                    theirs[key] = claim
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
                out.update(self._send(mine, progress, arrived, payer))
        finally:  # stored (or failed): hand the responses to whoever waits for our keys
            self._release_claims(claimed, out)
        if theirs:
            found = {}
            for key, claim in theirs.items():
                response = claim.result()
                if response is not None and response.finish_reason != "error":
                    found[key] = response
            out.update({k: r.model_copy(update={"cached": True}) for k, r in found.items()})
            leftover = {k: pending[k] for k in theirs if k not in found}
            with self._db_lock:
                self.hits += len(found)
            if found:
                progress(len(found))
            if leftover:  # the other thread failed or got an error response: send ourselves
                out.update(self._send(leftover, progress, arrived, payer))
        return out

    def _send(
        self,
        batch: dict[str, GenerationRequest],
        progress: ProgressCallback,
        arrived: Callable[[str, GenerationResponse], None],
        payer: Payer | None,
    ) -> dict[str, GenerationResponse]:
        keys = list(batch)
        with self._db_lock:
            self.misses += len(keys)
        stored: set[int] = set()
        group = _WriteGroup(self._store)

        def store_soon(index: int, response: GenerationResponse) -> None:
            group.add((keys[index], batch[keys[index]], response, payer))
            stored.add(index)
            arrived(keys[index], response)

        try:
            responses = self.engine.generate([batch[k] for k in keys], progress, on_response=store_soon)
        finally:  # a failed batch keeps every response that arrived
            group.flush()
        check_batch_size(self.engine_id, len(responses), len(keys))
        # Engines that do not report responses one by one are stored here, in one go.
        self._store([(k, batch[k], r, payer) for i, (k, r) in enumerate(zip(keys, responses)) if i not in stored])
        return dict(zip(keys, responses))

    def _release_claims(self, keys: Any, responses: dict[str, GenerationResponse]) -> None:
        """Drop our claim on `keys` (stored by now, or failed) and hand each waiter the
        response (None: it failed here)."""
        with self._db_lock:
            claims = [(self._inflight.pop(key, None), responses.get(key)) for key in keys]
        for claim, response in claims:
            if claim is not None and not claim.done():
                claim.set_result(response)

    def _lookup(self, keys: set[str]) -> dict[str, GenerationResponse]:
        with self._db_lock:
            return self._lookup_locked(keys)

    def _lookup_locked(self, keys: set[str]) -> dict[str, GenerationResponse]:
        """`_lookup` with `_db_lock` held by the caller."""
        found: dict[str, GenerationResponse] = {}
        ordered = sorted(keys)
        rows: list[tuple[str, str]] = []
        for start in range(0, len(ordered), _LOOKUP_CHUNK):
            chunk = ordered[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows.extend(self._conn.execute(f"SELECT key, response FROM calls WHERE key IN ({marks})", chunk).fetchall())
        for key, blob in rows:
            try:
                found[key] = GenerationResponse.model_validate_json(blob)
            except ValueError:  # a damaged row is a miss, and gets overwritten
                continue
        return found

    def _store(self, items: list[_Row]) -> None:
        """Commit fresh responses, and what each cost its payer (the ledger), in one transaction."""
        now = time.time()
        kept = [item for item in items if item[2].finish_reason != "error"]
        rows = [
            (key, self.engine_id, request.model_dump_json(), response.model_dump_json(exclude={"cached"}), now)
            for key, request, response, _ in kept
        ]
        booked = []
        for key, _, response, payer in kept:
            if payer is not None:
                spend = payer.charge(response)
                booked.append((key, payer.role, spend.prompt_tokens, spend.completion_tokens, spend.usd, now))
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
                self._conn.executemany(
                    "INSERT INTO spend (key, role, prompt_tokens, completion_tokens, usd, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    booked,
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise


def _reporter(
    keys: Sequence[str], results: Sequence[GenerationResponse | None], report: BatchReport
) -> Callable[[str, GenerationResponse], None]:
    """What reports a fresh response of a batch as it arrives: at every position of its key still
    without a response (the copies too), so a caller whose batch fails later has seen it."""
    positions: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if results[i] is None:
            positions.setdefault(key, []).append(i)

    def arrived(key: str, response: GenerationResponse) -> None:
        for i in positions.get(key, ()):
            report.done(i, response.model_copy())

    return arrived


def _resolve(
    future: Future[GenerationResponse],
    response: GenerationResponse | None = None,
    exception: BaseException | None = None,
) -> None:
    """Complete `future` unless its caller cancelled it (gave up on it) meanwhile."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            assert response is not None
            future.set_result(response)
    except InvalidStateError:  # cancelled by its caller
        pass


def _pass_on(source: Future[GenerationResponse], target: Future[GenerationResponse]) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        _resolve(target, exception=source.exception())
    else:
        _resolve(target, source.result())


def read_spend(path: Path | str) -> dict[str, Spend]:
    """What the ledger of the call cache at `path` booked, by role ({} when the file or its
    ledger does not exist): every call paid through a meter, every session of the run."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
        try:
            rows = conn.execute(
                "SELECT role, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(usd) FROM spend GROUP BY role"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise EngineError(f"{path}: cannot read the call cache's ledger ({exc})") from exc
    except sqlite3.DatabaseError as exc:
        raise EngineError(f"{path}: cannot read the call cache's ledger ({exc})") from exc
    return {
        role: Spend(calls=int(calls), prompt_tokens=int(pt or 0), completion_tokens=int(ct or 0), usd=float(usd or 0.0))
        for role, calls, pt, ct, usd in rows
    }
