"""Streamed stages (`pipeline: streamed`) against the staged order, on scripted fakes: the same
files byte for byte, true progress totals, calls booked to their stages, a target and a
teacher at work at the same time. The real-model comparison and the SIGKILL of a streamed run
are in test_streamed_real.py."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from test_loop import RecordingProgress, make_config, write_pairs

from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.loop.graph import execute
from bias_discovery.run import RunDir

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world, quiet_authority_p_a, quiet_authority_world

TEACHER = "llamacpp/teacher-unused-in-these-tests.gguf"
"""A teacher config other than the target's, so the two roles get engines of their own."""


def uncached(files: dict[str, bytes]) -> dict[str, bytes]:
    """`RunDir.outputs` without the `cached` flags and counts (a resumed run finds its earlier calls
    in the cache, and says so)."""
    return {
        name: re.sub(
            rb'"cached_calls": \d+', b'"cached_calls": _', re.sub(rb'"cached": (true|false)', b'"cached": _', data)
        )
        for name, data in files.items()
    }


def paid_counts(cache: Path) -> list[int]:
    """How often each call in a call cache was paid for (1 unless paid twice)."""
    import sqlite3

    with sqlite3.connect(cache) as conn:
        return [row[0] for row in conn.execute("SELECT paid FROM calls")]


def picky_identifier(request: GenerationRequest) -> str:
    """authority_world, whose identifier answers the first attempt (greedy) with broken JSON
    for every third item: the retry, sampled, is what names the bias."""
    user = request.messages[-1].content
    if "preferred the WRONG one" in user and request.temperature == 0.0:
        number = re.search(r"number (\d+)", user)
        if number and int(number.group(1)) % 3 == 0:
            return '{"bias_found": tru'
    return authority_world(request)


def run_both(tmp_path: Path, world, probability=None, **overrides):  # type: ignore[no-untyped-def]
    """The same run staged and streamed, each with its own call cache; a separate target and
    teacher engine (the checker is the target). Returns the two run directories and the
    progress each recorded."""
    out = {}
    for pipeline in ("staged", "streamed"):
        config = make_config(tmp_path, teacher=TEACHER, pipeline=pipeline, **overrides)
        rd = RunDir(tmp_path / pipeline)
        rd.root.mkdir()
        rd.config_path.write_text(config.to_yaml())
        target = CachedEngine(ScriptedEngine(world, "fake/target", probability_of_a=probability), rd.cache_path)
        teacher = CachedEngine(ScriptedEngine(world, "fake/teacher"), rd.cache_path)
        progress = RecordingProgress()
        try:
            execute(
                rd,
                config,
                resume=False,
                engines={"target": target, "teacher": teacher},
                embedder=BagOfWordsEmbedder(),
                progress=progress,
            )
        finally:
            target.close()
            teacher.close()
        out[pipeline] = (rd, progress)
    return out


def data(tmp_path: Path, n_target: int, n_test: int) -> dict:
    return {
        "target": str(write_pairs(tmp_path / f"target{n_target}.jsonl", n_target, "t", "Target question")),
        "test": str(write_pairs(tmp_path / f"test{n_test}.jsonl", n_test, "p", "Test question")),
    }


def test_streamed_and_staged_runs_write_the_same_files(tmp_path):
    """Two iterations, the seed library validated first, both orders judged, identify retries,
    validation in three looks on 40 of 50 items (10 held out, judged after the decision for an
    accepted candidate): every file the same, byte for byte, in the same order; every bar ends
    at its true total."""
    runs = run_both(
        tmp_path,
        picky_identifier,
        max_iterations=2,
        data=data(tmp_path, 24, 50),
        judge={"positions": "both"},
        validate={"n_boot": 200, "seeds": True, "sequential": {"min_items": 10}},
    )
    (staged, staged_bars), (streamed, streamed_bars) = runs["staged"], runs["streamed"]
    a, b = staged.outputs(), streamed.outputs()
    assert sorted(a) == sorted(b)
    assert {
        "iter_001/judgments.jsonl",
        "iter_001/identified.jsonl",
        "iter_002/validation.json",
        "placebo/result.json",
    } <= set(a)
    for name in a:
        assert a[name] == b[name], name
    identified = [
        json.loads(line) for line in (streamed.root / "iter_001" / "identified.jsonl").read_text().splitlines()
    ]
    assert any(r["attempts"] == 2 and r["status"] == "bias" for r in identified)  # a retry named the bias
    validation = json.loads((streamed.root / "iter_001" / "validation.json").read_text())
    assert len(validation["candidates"][0]["looks"]) > 1 and validation["accepted"]
    accepted = next(c for c in validation["candidates"] if c["bias_id"] in validation["accepted"])
    assert (
        accepted["effect"]["method"].startswith("held-out items")
        and "10 of them kept from every decision" in accepted["effect"]["method"]
    )
    # the same steps with the same true totals, each counted to its end
    assert [step[:2] for step in streamed_bars.steps] == [step[:2] for step in staged_bars.steps]
    assert all(done == total for _, total, done in streamed_bars.steps), streamed_bars.steps


def test_score_verdicts_without_deeper_explanations_stream_the_same_files(tmp_path):
    runs = run_both(
        tmp_path,
        quiet_authority_world,
        quiet_authority_p_a,
        max_iterations=1,
        data=data(tmp_path, 12, 24),
        judge={"positions": "swap", "verdict": "score"},
        deeper_explain={"enabled": False},
        validate={"n_boot": 200, "seeds": True, "sequential": {"min_items": 6}},
    )
    a, b = runs["staged"][0].outputs(), runs["streamed"][0].outputs()
    assert a == b
    seeds = runs["streamed"][0].root / "iter_000"  # the quiet judge never errs: only the seeds are validated
    judged = [json.loads(line) for line in (seeds / "validation_judgments.jsonl").read_text().splitlines()]
    assert judged and all(j["p_rejected"] is not None for j in judged)
    assert json.loads((seeds / "validation.json").read_text())["measure"] == "p_rejected"


def test_streamed_calls_are_booked_to_their_stages(tmp_path):
    """Calls and tokens per stage and role (status, the report) say the same in both orders,
    although the streamed stages run at once."""
    runs = run_both(tmp_path, authority_world, max_iterations=1, data=data(tmp_path, 12, 12))
    usage = {}
    for pipeline, (rd, _) in runs.items():
        ends = [e for e in rd.read_events() if e["event"] == "stage_end"]
        usage[pipeline] = sorted((e["iteration"], e["stage"], json.dumps(e["usage"], sort_keys=True)) for e in ends)
    assert usage["streamed"] == usage["staged"]
    stages = {stage for _, stage, _ in usage["streamed"]}
    assert {"perturb", "evaluate", "deeper_explain", "identify", "merge", "placebo", "validate"} <= stages


class Slow(ScriptedEngine):
    """A scripted engine whose every call takes `seconds`; writes the start and the end of each
    call, in order, to `events` (shared by the engines: an order, not times)."""

    def __init__(self, world, engine_id: str, seconds: float, events: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(world, engine_id)
        self.seconds = seconds
        self.events = events

    def _generate_one(self, request):  # type: ignore[no-untyped-def]
        self.events.append((self.engine_id, "start"))
        time.sleep(self.seconds)
        response = super()._generate_one(request)
        self.events.append((self.engine_id, "end"))
        return response


def _both_busy(events: list[tuple[str, str]]) -> int:
    """How many calls started while a call of the other engine was running."""
    running: dict[str, int] = {}
    together = 0
    for engine, what in events:
        if what == "start":
            together += any(n for other, n in running.items() if other != engine)
            running[engine] = running.get(engine, 0) + 1
        else:
            running[engine] -= 1
    return together


def test_streamed_target_and_teacher_work_at_the_same_time(tmp_path):
    """With separate engines, the judge works while the teacher is still rewriting (staged:
    never within an iteration's front half)."""
    busy: dict[str, int] = {}
    for pipeline in ("staged", "streamed"):
        config = make_config(
            tmp_path,
            teacher=TEACHER,
            pipeline=pipeline,
            max_iterations=1,
            data=data(tmp_path, 12, 8),
            validate={"n_boot": 200, "sequential": {"enabled": False}},
        )
        rd = RunDir(tmp_path / pipeline)
        rd.root.mkdir()
        rd.config_path.write_text(config.to_yaml())
        events: list[tuple[str, str]] = []
        target = Slow(authority_world, "fake/target", 0.01, events)
        teacher = Slow(authority_world, "fake/teacher", 0.01, events)
        execute(rd, config, resume=False, engines={"target": target, "teacher": teacher}, embedder=BagOfWordsEmbedder())
        busy[pipeline] = _both_busy(events)
    assert busy["staged"] == 0  # each stage waits for the one before it
    assert busy["streamed"] > 0, busy


def interrupted_setup(tmp_path: Path, name: str, n_target: int):  # type: ignore[no-untyped-def]
    """(an uninterrupted streamed run to compare with, the config, the run directory to
    interrupt): one iteration on `n_target` target and 12 test pairs, target and teacher apart."""
    (tmp_path / "ref").mkdir()
    reference = run_both(tmp_path / "ref", authority_world, max_iterations=1, data=data(tmp_path, n_target, 12))[
        "streamed"
    ][0]
    config = make_config(tmp_path, teacher=TEACHER, max_iterations=1, data=data(tmp_path, n_target, 12))
    rd = RunDir(tmp_path / name)
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    return reference, config, rd


def resume_with_healthy_engines(rd: RunDir, config) -> None:  # type: ignore[no-untyped-def]
    target = CachedEngine(ScriptedEngine(authority_world, "fake/target"), rd.cache_path)
    teacher = CachedEngine(ScriptedEngine(authority_world, "fake/teacher"), rd.cache_path)
    try:
        execute(rd, config, resume=True, engines={"target": target, "teacher": teacher}, embedder=BagOfWordsEmbedder())
    finally:
        target.close()
        teacher.close()


def test_a_failing_request_fails_the_stream_and_resume_pays_nothing_twice(tmp_path):
    """An engine error mid-stream (the second judge call) fails the run (status failed, the
    error named); resumed, it finishes with the files of an uninterrupted run (the `cached`
    flags aside: they say which calls the resume found in the cache), and the call cache paid
    each call once."""
    reference, config, rd = interrupted_setup(tmp_path, "failing", 12)
    judged = {"n": 0}
    lock = threading.Lock()

    def falls_over(request):  # type: ignore[no-untyped-def]
        if "[Response A]" in request.messages[-1].content:
            with lock:
                judged["n"] += 1
                if judged["n"] == 2:
                    raise RuntimeError("the judge fell over")
        return authority_world(request)

    target = CachedEngine(ScriptedEngine(falls_over, "fake/target"), rd.cache_path)
    teacher = CachedEngine(ScriptedEngine(authority_world, "fake/teacher"), rd.cache_path)
    with pytest.raises(RuntimeError, match="fell over"):
        execute(rd, config, resume=False, engines={"target": target, "teacher": teacher}, embedder=BagOfWordsEmbedder())
    target.close()
    teacher.close()
    state = rd.read_state()
    assert state.status == "failed" and "fell over" in (state.error or "") and state.stage in ("perturb", "evaluate")
    resume_with_healthy_engines(rd, config)
    assert uncached(rd.outputs()) == uncached(reference.outputs())
    assert max(paid_counts(rd.cache_path)) == 1


KILLED_RUN = """
import sys, time
sys.path.insert(0, {tests!r})
from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from bias_discovery.config import load_run_config
from bias_discovery.loop.graph import execute
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.run import RunDir

class Slow(ScriptedEngine):
    def _generate_one(self, request):
        time.sleep({seconds})
        return super()._generate_one(request)

rd = RunDir({root!r})
config = load_run_config(rd.config_path)
engines = {{"target": CachedEngine(Slow(authority_world, "fake/target"), rd.cache_path),
           "teacher": CachedEngine(Slow(authority_world, "fake/teacher"), rd.cache_path)}}
execute(rd, config, resume=False, engines=engines, embedder=BagOfWordsEmbedder())
"""


def _stored(cache: Path, what: str) -> int:
    """Calls in the cache whose request contains `what` (0 before the table exists)."""
    import sqlite3

    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=30) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM calls WHERE request LIKE ?", (f"%{what}%",)).fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_a_sigkilled_stream_resumes_paying_nothing_twice_with_the_same_files(tmp_path):
    """A streamed run SIGKILLed while the teacher is still rewriting and the judge already
    judging (both engines at work in iteration 1's front half), then resumed: it finishes with
    the files of an uninterrupted run (the `cached` flags aside) and no call paid twice."""
    import subprocess
    import sys

    from helpers import sigkill_when

    reference, config, rd = interrupted_setup(tmp_path, "killed", 24)
    script = KILLED_RUN.format(tests=str(Path(__file__).parent), seconds=0.05, root=str(rd.root))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def mid_stream() -> bool:  # judgments stored while rewrites are still to come
        return _stored(rd.cache_path, "[Response A]") > 0 and _stored(rd.cache_path, "Trait:") < 24

    sigkill_when(process, mid_stream, timeout=120, what="a judgment stored mid-stream")
    assert 0 < _stored(rd.cache_path, "Trait:") < 24 and rd.read_state().stage in ("perturb", "evaluate")
    assert not rd.iteration(1).perturbed.exists()  # the stream writes its files at its end
    resume_with_healthy_engines(rd, config)
    assert rd.read_state().status == "finished"
    assert uncached(rd.outputs()) == uncached(reference.outputs())
    assert max(paid_counts(rd.cache_path)) == 1
