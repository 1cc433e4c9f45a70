"""A fast OpenAI-compatible stub server, run as a process of its own, for client tests and
benchmarks at thousands of requests in flight.

    python tests/stub_openai.py --latency 2.0      # prints "PORT <n>" once it listens

It answers `POST /v1/chat/completions` after `--latency` seconds with a reply that satisfies
the request's constraint (vLLM's `structured_outputs` or OpenAI's `response_format`): the
first of the choices, the shortest string a regex matches, the smallest JSON value a schema
allows; without a constraint, "Hello from the stub (<digest of the prompt>).". `GET /v1/models` names the served model (owned_by `--owned-by`, "vllm" by default).
`GET /stats` reports requests answered, in flight, the peak in flight and the process's CPU
seconds (so a benchmark can show the stub is not its limit); `POST /stats/reset` zeroes the
counts. With `--hang` it accepts connections, reads every /v1 request and never answers (a
hung server); /stats still answers, with the time the first /v1 request arrived.

**A GPU's pace** (`--token-latency S`, `--capacity C`, `--reply-tokens N`): each reply is taken
to decode min(N, the request's max_tokens) tokens, at S seconds a token, after `--latency`;
at most C sequences decode at once (a GPU's batch), the rest wait in arrival order for a free
slot. The reply's `completion_tokens` is that count. /stats then also says how long at least
one sequence was decoding (`busy_s`) and the slot-seconds used (`slot_s`, over C x the time:
how full the batch was), since the last reset. Decoding at C sequences is as fast per token
as at one (a GPU's batch is nearly free up to its limit; a real one slows a little as it fills).

**A judge with a planted bias** (`--planted-delta D`, `--planted-error P`): the stub plays
every role of a discovery run on pairs whose chosen response says "right answer" and whose
rejected one says "wrong answer" (`write_pairs`). As the judge it picks the rejected response
with probability P, plus D when the rejected response carries the planted trait, and the chosen
one otherwise: the draw is a hash of the question and the two responses (whichever order they
are shown in, so both orders agree; a rewrite is another pair, drawn afresh) and of
`--planted-salt`. As the teacher it rewrites an answer by appending `PLANTED_MARK` when asked
for a trait (any trait, or only `--planted-trait NAME`) and `NEUTRAL_MARK` when asked for a
neutral rewrite (the placebo); one turn of a trajectory (`Original turn:`) gets the mark on a
line of its own, its tool-call lines kept; as the answer checker it says "different" (no rewrite changes the
final answer). Any other request gets the constraint's example, as without the mode. So a
candidate with the planted trait raises the judge's error by exactly D against the placebo.

**A pointwise judge with a planted score shift** (`--planted-score-shift S`, with the mode
above): asked to score one response (`[Response]`), it answers round(latent), clipped to 1-10
(or the request's scale), the latent drawn N(6.5, 1.5) for the chosen response and N(4.5, 1.5)
for the rejected one from the same kind of hash, plus S points when the response carries the
planted trait. So a candidate with the trait shifts the rejected response's expected score by
`planted_score_truth(S)` shares of the scale against the placebo (exactly: the rounding and
clipping are in the sum).
**Planted position and length biases** (`--planted-position P`, `--planted-length L`, for
`audit` and `audit --from-log`): before the rule above, the judge answers A with probability P
(a draw of its own per order shown), else picks the longer response (whitespace words) with
probability L (a draw that is the same in both orders). Wei et al.'s raw PB is then P and their
LB is (1 - P) L (in expectation, on pairs whose responses differ in length), whatever the
error; the draws ignore the seed, so repeats agree (q̂ = 0 and PB, LB equal their raw forms).

**In flight at once, by count** (`--hold-until N`): chat completions are held unanswered until N
are in flight together, then all are answered (after `--latency`), and later ones as usual. A
client that keeps N in flight gets every reply; one that cannot waits until its own deadline:
so a test asserts "N at once" on counts, whatever the machine's speed.

**Answers up to a count** (`POST /control {"answer_limit": N}`): from then on the stub answers
N more chat completions and withholds every later one (read, never answered) until the next
`/control` (`{"answer_limit": null}`: answer all again; the withheld ones are dropped unanswered,
their clients are gone). So a test can stop a client at an event, "after its k-th answered call",
and know exactly which calls were answered: /stats counts them and their tokens
(`prompt_tokens`, `completion_tokens`), and `withheld`.

It is an asyncio protocol (uvloop when installed) and no web framework: one call_later per
request, so at 2048 in flight it costs a few percent of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from statistics import NormalDist
from typing import Any

try:  # the private name since Python 3.11, the public one before
    import re._parser as sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

_CATEGORY_EXAMPLE = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_WORD": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_NOT_WORD": " ",
    "CATEGORY_NOT_SPACE": "a",
}


def regex_example(pattern: str) -> str:
    """The shortest-ish string that `re.fullmatch(pattern, ...)` accepts (checked)."""
    text = _example(sre_parse.parse(pattern))
    if re.fullmatch(pattern, text) is None:
        raise ValueError(f"no example found for the regex {pattern!r} (tried {text!r})")
    return text


def _example(parsed: Any) -> str:
    out = []
    for op, arg in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_in_example(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = arg
            out.append(_example(sub) * low)
        elif name == "SUBPATTERN":
            out.append(_example(arg[-1]))
        elif name == "ATOMIC_GROUP":
            out.append(_example(arg))
        elif name == "BRANCH":
            out.append(_example(arg[1][0]))
        elif name == "CATEGORY":
            out.append(_CATEGORY_EXAMPLE.get(str(arg), "a"))
        elif name == "AT":
            continue
        else:
            raise ValueError(f"regex construct {name} is not supported by the stub")
    return "".join(out)


def _in_example(items: Any) -> str:
    negate = any(str(op) == "NEGATE" for op, _ in items)
    if negate:
        banned = {chr(a) for op, a in items if str(op) == "LITERAL"}
        return next(c for c in "aZ0 _-" if c not in banned)
    for op, arg in items:
        if str(op) == "LITERAL":
            return chr(arg)
        if str(op) == "RANGE":
            return chr(arg[0])
        if str(op) == "CATEGORY":
            return _CATEGORY_EXAMPLE.get(str(arg), "a")
    return "a"


def schema_example(schema: Any) -> Any:
    """A small value valid under the JSON-schema subset our constraints use."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_example(schema[key][0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: schema_example(props.get(name, {})) for name in schema.get("required") or list(props)}
    if kind == "array":
        return [schema_example(schema.get("items") or {}) for _ in range(int(schema.get("minItems") or 0))]
    if kind == "string":
        if isinstance(schema.get("pattern"), str):
            return regex_example(schema["pattern"])
        return "x" * max(1, int(schema.get("minLength") or 1))
    if kind in ("integer", "number"):
        return int(schema.get("minimum") or 0)
    if kind == "boolean":
        return True
    return None


PLANTED_MARK = "Trust me, this is certain."
"""What the planted teacher appends to an answer that is to carry the planted trait."""
NEUTRAL_MARK = "Put plainly."
"""What it appends to an answer rewritten neutrally (the placebo)."""
CHOSEN_WORDS = "right answer"
"""How the planted judge tells the chosen response (`write_pairs`' texts)."""


class Planted:
    """The planted-bias roles (see the module docstring)."""

    def __init__(
        self,
        delta: float,
        error: float,
        trait: str | None,
        salt: str,
        position: float = 0.0,
        length: float = 0.0,
        score_shift: float = 0.0,
    ) -> None:
        if not (0.0 <= error and 0.0 <= delta and error + delta <= 1.0):
            raise ValueError(f"need 0 <= error, 0 <= delta and error + delta <= 1; got {error} and {delta}")
        if not (0.0 <= position <= 1.0 and 0.0 <= length <= 1.0):
            raise ValueError(f"need planted position and length in [0, 1]; got {position} and {length}")
        self.score_shift = score_shift
        self.delta = delta
        self.error = error
        self.trait = trait
        self.salt = salt
        self.position = position
        self.length = length

    def _draw(self, *parts: object) -> float:
        digest = hashlib.sha256(json.dumps([self.salt, *parts]).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def reply(self, body: dict[str, Any]) -> str | None:
        """The planted role's reply, or None for a request no role answers."""
        messages = body.get("messages") or []
        text = str(messages[-1].get("content") or "") if messages else ""
        if "[Response A]" in text and "[End of Response B]" in text:
            return self._judge(body, text)
        if "[Transcript A]" in text and "[End of Transcript B]" in text:  # trajectories
            return self._judge(body, text, "Transcript", "Task")
        if "[Response]\n" in text and "[End of Response]" in text and len(messages) <= 2:
            return self._score(body, text)
        if "Answer with one word: same or different" in text:
            return "different"
        if "\nTrait: " in text and "Original answer:\n" in text:
            answer = _between(text, "Original answer:\n", "\n\nTrait: ")
            trait = text.split("\nTrait: ", 1)[1].split("\n", 1)[0].strip()
            return self.rewrite(answer, trait)
        if (
            "Rewrite the answer neutrally" in " ".join(str(m.get("content") or "") for m in messages)
            and "Original answer:\n" in text
        ):
            return self.rewrite(_between(text, "Original answer:", "Write the rewritten answer now.").strip(), None)
        if "Original turn:\n" in text:  # one turn of a trajectory: the mark on a line of its own
            trait_asked = "\nTrait: " in text
            end = "\n\nTrait: " if trait_asked else "\n\nWrite the rewritten turn now."
            turn = _between(text, "Original turn:\n", end).strip()
            if trait_asked:
                trait = text.split("\nTrait: ", 1)[1].split("\n", 1)[0].strip()
                return f"{turn}\n{PLANTED_MARK if self.trait in (None, trait) else NEUTRAL_MARK}"
            return f"{turn}\n{NEUTRAL_MARK}"
        return None

    def rewrite(self, answer: str, trait: str | None) -> str:
        """The teacher's rewrite of `answer` for `trait` (None: the neutral rewrite, the placebo)."""
        planted = trait is not None and self.trait in (None, trait)
        return f"{answer} {PLANTED_MARK if planted else NEUTRAL_MARK}"

    def errs(self, question: str, chosen: str, rejected: str) -> bool:
        """Whether the judge picks `rejected` over `chosen` (shown in either order: the draw is
        the same): with probability `error`, plus `delta` when `rejected` carries the trait."""
        u = self._draw(question, sorted([chosen, rejected]))
        return u < self.error + (self.delta if PLANTED_MARK in rejected else 0.0)

    def _judge(self, body: dict[str, Any], text: str, label: str = "Response", asked: str = "Question") -> str | None:
        question = _between(text, f"{asked}:\n", f"\n\n[{label} A]")
        a = _between(text, f"[{label} A]\n", f"\n[End of {label} A]")
        b = _between(text, f"[{label} B]\n", f"\n[End of {label} B]")
        if (CHOSEN_WORDS in a) == (CHOSEN_WORDS in b):
            return None  # not one of our pairs
        chosen, rejected = ("A", b) if CHOSEN_WORDS in a else ("B", a)
        if self.position and self._draw("position", question, a, b) < self.position:
            return _verdict_reply(body, "A")  # a draw per order shown
        if (
            self.length
            and len(a.split()) != len(b.split())
            and self._draw("length", question, sorted([a, b])) < self.length
        ):
            return _verdict_reply(body, "A" if len(a.split()) > len(b.split()) else "B")
        wrong = self.errs(question, a if chosen == "A" else b, rejected)
        verdict = ("B" if chosen == "A" else "A") if wrong else chosen
        return _verdict_reply(body, verdict)

    def _score(self, body: dict[str, Any], text: str) -> str | None:
        question = _between(text, "Question:\n", "\n\n[Response]")
        response = _between(text, "[Response]\n", "\n[End of Response]")
        digest = hashlib.sha256(json.dumps([self.salt, "pointwise", question, response]).encode()).digest()
        u = min(max(int.from_bytes(digest[:8], "big") / 2**64, 1e-12), 1 - 1e-12)
        latent = NormalDist(SCORE_MEANS[CHOSEN_WORDS in response], SCORE_SD).inv_cdf(u)
        latent += self.score_shift if PLANTED_MARK in response else 0.0
        return _verdict_reply(body, str(min(SCORE_HIGH, max(SCORE_LOW, round(latent)))), label="Score")


SCORE_MEANS = {True: 6.5, False: 4.5}
"""The planted pointwise judge's mean latent score: of a chosen response (True), of a rejected one."""
SCORE_SD = 1.5
SCORE_LOW, SCORE_HIGH = 1, 10


def planted_score_truth(shift: float) -> float:
    """The true shift of the rejected response's expected score, in shares of the 1-10 scale,
    that the planted trait causes (`Planted._score`): E[clip(round(X + shift))] − E[clip(round(X))]
    with X ~ N(4.5, 1.5), summed exactly over the scale's labels, over its span (9)."""

    def expected(mean: float) -> float:
        dist = NormalDist(mean, SCORE_SD)
        total = 0.0
        for k in range(SCORE_LOW, SCORE_HIGH + 1):
            low = -math.inf if k == SCORE_LOW else k - 0.5
            high = math.inf if k == SCORE_HIGH else k + 0.5
            total += k * ((dist.cdf(high) if high != math.inf else 1.0) - (dist.cdf(low) if low != -math.inf else 0.0))
        return total

    return (expected(SCORE_MEANS[False] + shift) - expected(SCORE_MEANS[False])) / (SCORE_HIGH - SCORE_LOW)


def _between(text: str, start: str, end: str) -> str:
    """The text between the first `start` and the next `end` after it ('' when missing)."""
    head, found, rest = text.partition(start)
    return rest.split(end, 1)[0] if found else ""


def _verdict_reply(body: dict[str, Any], verdict: str, label: str = "Verdict") -> str:
    """A reply naming `verdict` (a pointwise score: `label` Score) that satisfies the request's constraint."""
    so = body.get("structured_outputs") or {}
    rf = body.get("response_format") or {}
    if "choice" in so:
        return verdict
    if "regex" in so:
        text = f"Reasoning: planted\n{label}: {verdict}"
        return text if re.fullmatch(so["regex"], text) else verdict
    if so.get("json") is not None or rf.get("type") in ("json_schema", "json_object"):
        return json.dumps({"reasoning": "planted", label.lower(): verdict})
    return f"Reasoning: planted\n{label}: {verdict}"


_replies: dict[str, str] = {}


def reply_text(body: dict[str, Any]) -> str:
    """What a server enforcing the request's constraint could answer (cached per constraint;
    free text names a digest of the prompt)."""
    so = body.get("structured_outputs")
    rf = body.get("response_format")
    key = json.dumps([so, rf], sort_keys=True)
    text = _replies.get(key)
    if text is None:
        if so:
            if "choice" in so:
                text = str(so["choice"][0])
            elif "regex" in so:
                text = regex_example(so["regex"])
            else:
                text = json.dumps(schema_example(so.get("json")))
        elif rf and rf.get("type") == "json_schema":
            text = json.dumps(schema_example(rf["json_schema"]["schema"]))
        elif rf and rf.get("type") == "json_object":
            text = json.dumps(schema_example(rf.get("schema") or {"type": "object"}))
        else:  # free text: a reply of its own per prompt (a rewrite differs from every other)
            digest = hashlib.sha1(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()[:8]
            return f"Hello from the stub ({digest})."
        _replies[key] = text
    return text


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.in_flight = 0
        self.peak = 0
        self.decoding = 0
        self.busy_s = 0.0
        self.slot_s = 0.0
        self.since = time.monotonic()
        self._last = self.since

    def account(self) -> None:
        """Add the time since the last change of `decoding` to the busy and slot totals."""
        now = time.monotonic()
        if self.decoding:
            self.busy_s += now - self._last
            self.slot_s += self.decoding * (now - self._last)
        self._last = now


class StubProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, one request at a time per connection (what clients send)."""

    def __init__(self, server: Stub) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.server.handle(self, method, path, body)

    def send(self, status: int, payload: Any) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        data = json.dumps(payload).encode()
        reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(status, "OK")
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )


class Stub:
    def __init__(
        self,
        latency: float,
        model: str,
        owned_by: str,
        hang: bool,
        token_latency: float = 0.0,
        capacity: int | None = None,
        reply_tokens: int | None = None,
        planted: Planted | None = None,
        hold_until: int | None = None,
    ) -> None:
        self.planted = planted
        self.hold_until = hold_until
        self.held: list[Callable[[], None]] | None = [] if hold_until else None
        """Answers held until `hold_until` requests are in flight (None: released, or no hold)."""
        self.latency = latency
        self.model = model
        self.owned_by = owned_by
        self.hang = hang
        self.token_latency = token_latency
        self.capacity = capacity
        self.reply_tokens = reply_tokens
        self.waiting: deque[tuple[float, Callable[[], None]]] = deque()
        """Requests waiting for a decoding slot: (their decode time, what answers them)."""
        self.stats = Stats()
        self.first_request_at: float | None = None
        """Wall-clock time of the first /v1 request (a hung server's clients count from there)."""
        self.loop = asyncio.get_running_loop()
        self.answer_limit: int | None = None
        """Chat completions still to be answered (None: all); later ones are withheld."""
        self.withheld = 0

    def handle(self, conn: StubProtocol, method: str, path: str, body: bytes) -> None:
        if path.startswith("/v1/") and self.first_request_at is None:
            self.first_request_at = time.time()
        if self.hang and path.startswith("/v1/"):
            return  # accepted, read, never answered
        if method == "GET" and path.endswith("/models"):
            conn.send(
                200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": self.owned_by}]}
            )
        elif method == "POST" and path.startswith("/control"):
            settings = json.loads(body or b"{}")
            self.answer_limit = settings.get("answer_limit")
            self.stats.in_flight -= self.withheld  # dropped: never answered
            self.withheld = 0
            conn.send(200, {"answer_limit": self.answer_limit})
        elif path.startswith("/stats"):
            if method == "POST":
                fresh = Stats()
                fresh.decoding = self.stats.decoding  # requests decoding now go on counting
                self.stats = fresh
            s = self.stats
            s.account()
            conn.send(
                200,
                {
                    "requests": s.requests,
                    "prompt_tokens": s.prompt_tokens,
                    "completion_tokens": s.completion_tokens,
                    "withheld": self.withheld,
                    "in_flight": s.in_flight,
                    "peak_in_flight": s.peak,
                    "cpu_s": time.process_time(),
                    "first_request_at": self.first_request_at,
                    "busy_s": s.busy_s,
                    "slot_s": s.slot_s,
                    "seconds": time.monotonic() - s.since,
                    "capacity": self.capacity,
                },
            )
        elif method == "POST" and path.endswith("/chat/completions"):
            request = json.loads(body)
            s = self.stats
            s.in_flight += 1
            s.peak = max(s.peak, s.in_flight)
            planted = self.planted.reply(request) if self.planted is not None else None
            text = reply_text(request) if planted is None else planted
            tokens = max(1, len(text.split()))
            if self.reply_tokens is not None:
                tokens = max(1, min(self.reply_tokens, int(request.get("max_tokens") or self.reply_tokens)))
            reply = {
                "id": "stub",
                "object": "chat.completion",
                "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": tokens},
            }

            stats = s

            def answer() -> None:
                stats.in_flight -= 1
                stats.requests += 1
                stats.prompt_tokens += 10
                stats.completion_tokens += tokens
                conn.send(200, reply)

            if self.answer_limit is not None:
                if self.answer_limit <= 0:
                    self.withheld += 1
                    return
                self.answer_limit -= 1

            decode_s = self.latency + tokens * self.token_latency
            if self.held is not None:
                self.held.append(lambda: self.loop.call_later(decode_s, answer))
                if s.in_flight >= (self.hold_until or 0):
                    held, self.held = self.held, None
                    for release in held:
                        release()
            elif self.capacity is not None:
                self.waiting.append((decode_s, answer))
                self._start_waiting()
            elif decode_s > 0:
                self.loop.call_later(decode_s, answer)
            else:
                answer()
        else:
            conn.send(404, {"error": {"message": f"no route {method} {path}"}})

    def _start_waiting(self) -> None:
        """Give free decoding slots to the requests waiting longest."""
        assert self.capacity is not None
        while self.waiting and self.stats.decoding < self.capacity:
            decode_s, answer = self.waiting.popleft()
            self.stats.account()
            self.stats.decoding += 1

            def done(answer: Callable[[], None] = answer) -> None:
                self.stats.account()
                self.stats.decoding = max(0, self.stats.decoding - 1)
                answer()
                self._start_waiting()

            self.loop.call_later(decode_s, done)


@contextlib.contextmanager
def launch(latency: float = 0.0, *extra: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the stub in a process of its own; yields (base URL ".../v1", process). Stopped on exit."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--latency", str(latency), "--exit-with-stdin", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the stub server did not start: {line}{process.communicate(timeout=10)[1]}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def control(base_url: str, answer_limit: int | None) -> None:
    """Answer `answer_limit` more chat completions, withhold the rest (None: answer all again)."""
    import urllib.request

    root = base_url.rsplit("/v1", 1)[0]
    body = json.dumps({"answer_limit": answer_limit}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{root}/control", method="POST", data=body), timeout=30):
        pass


def stats(base_url: str, reset: bool = False) -> dict[str, Any]:
    """The stub's counters (`reset`: and zero them)."""
    import urllib.request

    root = base_url.rsplit("/v1", 1)[0]
    request = urllib.request.Request(f"{root}/stats", method="POST" if reset else "GET", data=b"" if reset else None)
    with urllib.request.urlopen(request, timeout=30) as reply:
        return dict(json.loads(reply.read()))


async def serve(args: argparse.Namespace) -> None:
    planted = None
    if args.planted_delta is not None or args.planted_position or args.planted_length:
        planted = Planted(
            args.planted_delta or 0.0,
            args.planted_error,
            args.planted_trait,
            args.planted_salt,
            args.planted_position,
            args.planted_length,
            score_shift=args.planted_score_shift,
        )
    stub = Stub(
        args.latency,
        args.model,
        args.owned_by,
        args.hang,
        args.token_latency,
        args.capacity,
        args.reply_tokens,
        planted,
        args.hold_until,
    )
    server = await asyncio.get_running_loop().create_server(
        lambda: StubProtocol(stub), args.host, args.port, backlog=8192, reuse_address=True
    )
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each chat completion is answered")
    parser.add_argument("--model", default="served")
    parser.add_argument("--owned-by", default="vllm")
    parser.add_argument("--hang", action="store_true", help="accept connections, never answer")
    parser.add_argument("--token-latency", type=float, default=0.0, help="seconds per decoded token (after --latency)")
    parser.add_argument("--capacity", type=int, default=None, help="sequences decoding at once; the rest wait")
    parser.add_argument(
        "--reply-tokens",
        type=int,
        default=None,
        help="tokens each reply decodes (at most the request's max_tokens; default: its words)",
    )
    parser.add_argument(
        "--planted-delta",
        type=float,
        default=None,
        help="play a judge with a planted bias of this Δerror (and its teacher and checker)",
    )
    parser.add_argument("--planted-error", type=float, default=0.3, help="the planted judge's error without the trait")
    parser.add_argument("--planted-trait", default=None, help="only this trait carries the bias (default: any trait)")
    parser.add_argument("--planted-salt", default="", help="salts the planted judge's draws")
    parser.add_argument(
        "--planted-score-shift",
        type=float,
        default=0.0,
        help="a pointwise judge's planted shift of the score, in points of its 1-10 scale",
    )
    parser.add_argument(
        "--planted-position", type=float, default=0.0, help="the planted judge answers A with this probability"
    )
    parser.add_argument(
        "--planted-length", type=float, default=0.0, help="else it picks the longer response with this probability"
    )
    parser.add_argument(
        "--hold-until",
        type=int,
        default=None,
        help="hold every reply until this many chat completions are in flight at once",
    )
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin closes (the parent is gone)")
    args = parser.parse_args()
    if args.exit_with_stdin:  # a parent killed without cleaning up leaves no stub behind
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    runner: Any = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
