"""The discovery loop's orchestration, driven by scripted fakes (see tests/fakes.py).

The real-model end-to-end run and the SIGKILL/resume test are in test_loop_real.py.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from pathlib import Path

import pytest

from bias_discovery.config import RunConfig, load_run_config
from bias_discovery.errors import ConfigError
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.loop.graph import execute
from bias_discovery.run import RunDir
from bias_discovery.stats import held_out_method

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import cli


def write_pairs(path: Path, n: int, prefix: str = "p", question: str = "Question") -> Path:
    domains = ["math", "knowledge", "reasoning", "code"]
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {
                        "id": f"{prefix}{i:02d}",
                        "question": f"{question} {i}?",
                        "chosen": f"RIGHT answer number {i}.",
                        "rejected": f"Wrong answer number {i}.",
                        "domain": domains[i % 4],
                    }
                )
                + "\n"
            )
    return path


def make_config(tmp_path: Path, **overrides) -> RunConfig:
    """A run config on 24 target and 24 test pairs (disjoint: the loop refuses overlapping
    data)."""
    target = write_pairs(tmp_path / "target-pairs.jsonl", 24, "t", "Target question")
    test = write_pairs(tmp_path / "pairs.jsonl", 24)
    raw = {
        "name": "fake-run",
        "target": "llamacpp/unused-in-these-tests.gguf",
        "teacher": "llamacpp/unused-in-these-tests.gguf",
        "max_iterations": 3,
        "data": {"target": str(target), "test": str(test)},
        "merge": {"similarity_threshold": 0.95},
        "validate": {"n_boot": 200},
    }
    raw.update(overrides)
    return RunConfig.model_validate(raw)


def run_fake(tmp_path: Path, config: RunConfig, name: str = "run", engine: ScriptedEngine | None = None, progress=None):
    rd = RunDir(tmp_path / name)
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    engine = engine or ScriptedEngine(authority_world)
    state = execute(
        rd, config, resume=False, engines={"target": engine}, embedder=BagOfWordsEmbedder(), progress=progress
    )
    return rd, state, engine


def test_every_bar_of_a_run_knows_its_total(tmp_path):
    """Merge used to open one bar without a total ("1/?"): now one per round, each counted."""
    config = make_config(
        tmp_path, max_iterations=1, validate={"n_boot": 200, "seeds": True}, merge={"similarity_threshold": -1.0}
    )
    progress = RecordingProgress()
    rd, _, _ = run_fake(tmp_path, config, progress=progress)
    assert [step for step in progress.steps if step[1] is None] == []
    merge = [step for step in progress.steps if "merge" in step[0]]
    questions = len([line for line in (rd.root / "iter_001" / "merges.jsonl").read_text().splitlines() if line])
    assert merge and sum(total for _, total, _ in merge) == questions > 0
    assert all(done == total for _, total, done in progress.steps), progress.steps


def test_a_resumed_step_counts_on_from_where_it_stopped(tmp_path):
    """Killed in the middle of the seed validation's rewrites, then resumed: the step's bar and
    its progress events start from the count reached before the kill, not from 0, before the
    engine (a model load, on a real run) has answered anything; and nothing is counted twice."""
    from bias_discovery.llm.cache import CachedEngine
    from bias_discovery.run import summarize_events

    config = make_config(tmp_path, max_iterations=1, validate={"n_boot": 200, "seeds": True})
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    calls = {"n": 0}

    def step_logged() -> bool:
        events = rd.read_events()
        return any(
            e["event"] == "progress" and e["stage"] == "validate_seeds" and e.get("step") == "perturb" for e in events
        )

    def dies_in_seed_rewrites(request):
        calls["n"] += 1
        if calls["n"] == 150:  # after the baseline and placebo, inside validate_seeds (perturb)
            # once the step's count is on record: streamed, the loop logs it a moment after the
            # responses it counts, and these answer at once
            deadline = time.monotonic() + 30
            while not step_logged() and time.monotonic() < deadline:
                time.sleep(0.01)
            raise KeyboardInterrupt
        return authority_world(request)

    with pytest.raises(KeyboardInterrupt):
        execute(
            rd,
            config,
            resume=False,
            engines={"target": CachedEngine(ScriptedEngine(dies_in_seed_rewrites), rd.cache_path)},
            embedder=BagOfWordsEmbedder(),
        )
    before = summarize_events(rd.read_events())["current"]
    assert before["stage"] == "validate_seeds" and before["step"] == "perturb" and before["done"] > 0

    bars = RecordingProgress()
    seen_at_first_call: list[int] = []

    class Watched(CachedEngine):
        def generate(self, requests, progress=None, on_response=None, payer=None):  # type: ignore[no-untyped-def]
            if not seen_at_first_call:
                seen_at_first_call.append(bars.steps[-1][2])
            return super().generate(requests, progress=progress, on_response=on_response, payer=payer)

        def submit(self, request, payer=None):  # type: ignore[no-untyped-def]
            if not seen_at_first_call:  # the streamed order's way in
                seen_at_first_call.append(bars.steps[-1][2])
            return super().submit(request, payer)

    execute(
        rd,
        config,
        resume=True,
        progress=bars,
        engines={"target": Watched(ScriptedEngine(authority_world), rd.cache_path)},
        embedder=BagOfWordsEmbedder(),
    )
    assert bars.steps[0][:2] == ["iter 0 validate_seeds (perturb)", before["total"]]
    assert seen_at_first_call == [before["done"]]
    assert all(done == total for _, total, done in bars.steps)  # counted on, never twice
    events = rd.read_events()
    since = max(i for i, e in enumerate(events) if e["event"] == "resume")
    counted = [
        e["done"]
        for e in events[since:]
        if e["event"] == "progress"
        and e["stage"] == "validate_seeds"
        and e.get("step") == "perturb"
        and e.get("total") == before["total"]  # the step that stopped (a later look is a step of its own)
    ]
    assert counted and min(counted) == before["done"]  # `status` counts on too


def test_loop_discovers_validates_and_converges(tmp_path):
    config = make_config(tmp_path)
    rd, state, _ = run_fake(tmp_path, config)

    assert state["stop_reason"].startswith("no candidates")
    assert state["iteration"] == 2
    store = RunDir(rd.root).library
    assert store.iterations() == [0, 1, 2]
    latest = store.load_latest()
    found = latest.by_id("d1-expert-citation-bias")
    assert found.origin.kind == "discovered" and found.origin.iteration == 1
    assert found.evidence and all("experts" in e.perturbed_response for e in found.evidence)
    v = found.validation
    # Every test item is right at baseline and wrong once the expert marker is injected.
    base = v.vs_baseline
    assert base.control_error == 0.0 and base.arm_error == 1.0 and base.delta == 1.0
    assert v.accepted and base.p_value < 1e-6 and base.n == 20
    # decided against the placebo on 20 of the 24 test items (4 held out: `validate.held_out`),
    # in one look (a look needs 20 items); the reported effect is the Δ on the 4 held out
    assert v.decisive == "placebo" and v.effect.method == held_out_method(4, 1, 1, reserved=4) and v.effect.n == 4
    assert v.effect.delta == v.vs_placebo.delta == 1.0 and v.stopped_at == 20
    assert v.error_statement and v.error_statement.startswith("Family-wise error over the run")
    assert set(v.per_domain) == {"math", "knowledge", "reasoning", "code"}

    # Iteration 2 names the same bias again; Merge recognises it as the library's.
    merges = [json.loads(line) for line in (rd.iteration(2).directory / "merges.jsonl").read_text().splitlines()]
    assert any(m["other_id"] == "d1-expert-citation-bias" and m["decision"] == "same" for m in merges)
    stats = json.loads((rd.iteration(2).directory / "merge_stats.json").read_text())
    assert stats["candidates"] == 0 and stats["teacher_calls"] < stats["all_pairs_calls"]

    for name in (
        "perturbed.jsonl",
        "judgments.jsonl",
        "misjudged.jsonl",
        "explanations.jsonl",
        "identified.jsonl",
        "candidates.json",
        "merges.jsonl",
        "validation.json",
    ):
        assert (rd.iteration(1).directory / name).is_file(), name
    run_state = rd.read_state()
    assert run_state.status == "finished" and run_state.stop_reason == state["stop_reason"]
    assert any(e["event"] == "stage_end" and e["stage"] == "validate" for e in rd.read_events())


def test_paper_rule_accepts_what_paired_rule_rejects_in_loop(tmp_path):
    """A bias that flips a single item: the paper's err>baseline rule accepts it, the paired test does not."""

    def one_flip_world(request):
        user = request.messages[-1].content
        judging = "[Response A]" in user and len(request.messages) <= 2
        if judging and "Test question" in user and "Test question 3?" not in user:
            from fakes import _responses

            a, _ = _responses(user)  # test items other than #3 ignore the marker
            pick = "A" if "RIGHT" in a else "B"
            return f"Reasoning: ok.\nVerdict: {pick}"
        return authority_world(request)

    results = {}
    for rule in ("paper", "paired"):
        config = make_config(
            tmp_path,
            max_iterations=1,
            validate={"n_boot": 200, "acceptance": rule},
            data={
                "target": str(write_pairs(tmp_path / "target.jsonl", 24, "t", "Target question")),
                "test": str(write_pairs(tmp_path / "test.jsonl", 24, "p", "Test question")),
            },
        )
        rd, _, _ = run_fake(tmp_path, config, name=f"run-{rule}", engine=ScriptedEngine(one_flip_world))
        validation = json.loads((rd.iteration(1).directory / "validation.json").read_text())
        results[rule] = validation["accepted"]
    assert results["paper"] and not results["paired"]


def test_late_validation_defers_to_the_end(tmp_path):
    config = make_config(tmp_path, validate={"when": "late", "n_boot": 200}, max_iterations=2)
    rd, state, _ = run_fake(tmp_path, config)
    assert not (rd.iteration(1).directory / "validation.json").exists()
    final_iteration = state["iteration"]
    validation = json.loads((rd.iteration(final_iteration).directory / "validation.json").read_text())
    assert validation["when"] == "late" and "d1-expert-citation-bias" in validation["accepted"]
    assert "d1-expert-citation-bias" in RunDir(rd.root).library.load_latest().ids()


@pytest.mark.parametrize("pipeline", ["staged", "streamed"])
def test_resume_after_crash_redoes_only_the_interrupted_stage(tmp_path, pipeline):
    config = make_config(tmp_path, pipeline=pipeline)
    reference, _, _ = run_fake(tmp_path, config, name="reference")

    def crashing(request):
        if "preferred the WRONG one" in request.messages[-1].content:
            raise RuntimeError("teacher fell over")
        return authority_world(request)

    rd = RunDir(tmp_path / "crashed")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    with pytest.raises(RuntimeError):
        execute(rd, config, resume=False, engines={"target": ScriptedEngine(crashing)}, embedder=BagOfWordsEmbedder())
    assert rd.read_state().status == "failed"

    healthy = ScriptedEngine(authority_world)
    execute(rd, config, resume=True, engines={"target": healthy}, embedder=BagOfWordsEmbedder())
    first_prompts = [r.messages[-1].content for r in healthy.sent]
    if pipeline == "staged":
        # Iteration 1's perturb and evaluate were checkpointed: the resumed run starts at identify.
        assert "preferred the WRONG one" in first_prompts[0]
    else:  # perturb ... identify are one node: it is redone (without a call cache, paid again)
        assert "Trait:" in first_prompts[0]
    a = RunDir(reference.root).library.load_latest()
    b = RunDir(rd.root).library.load_latest()
    assert a.same_content(b)


def test_config_errors_name_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("target: hf/smollm2\nteacher: hf/smollm2\nmax_iteratons: 2\n")
    with pytest.raises(ConfigError, match="max_iteratons"):
        load_run_config(path)
    path.write_text("target: hf/smollm2\nteacher: hf/smollm2\nvalidate:\n  alpha: 2\n")
    with pytest.raises(ConfigError, match=r"validate\.alpha"):
        load_run_config(path)
    path.write_text("target: hf/smollm2\nteacher: hf/smollm2\nvalidate:\n  sequential:\n    looks: [0.5, 0.25, 1.0]\n")
    with pytest.raises(ConfigError, match=r"validate\.sequential\.looks.*must increase"):
        load_run_config(path)
    path.write_text("target: nosuch/model\nteacher: hf/smollm2\n")
    with pytest.raises(ConfigError, match="known providers"):
        load_run_config(path)
    ok = load_run_config(
        Path(__file__).parents[1] / "experiments" / "quickstart-cpu.yaml", ["max_iterations=1", "target.n_ctx=2048"]
    )
    assert ok.max_iterations == 1 and ok.target.n_ctx == 2048 and ok.teacher.n_ctx != 2048


def test_a_bad_set_value_is_blamed_on_the_set_override_not_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("target: hf/smollm2\nteacher: hf/smollm2\nvalidate:\n  alpha: 2\n")
    with pytest.raises(ConfigError) as info:
        load_run_config(path, ["max_iterations=abc", "judge.reasoning_chars=5"])
    message = str(info.value)
    assert message.startswith(
        "invalid config: `overrides` max_iterations=abc: max_iterations: Input should be a valid integer"
    )
    assert (
        "`overrides` judge.reasoning_chars=5: judge.reasoning_chars: Input should be greater than or equal to 20"
        in message
    )
    assert f"{path}: validate.alpha" in message  # the file's own mistake is still the file's
    with pytest.raises(ConfigError, match=r"^invalid config: `overrides` judge\.bogus=1: judge\.bogus: Extra inputs"):
        load_run_config(Path(__file__).parents[1] / "experiments" / "quickstart-cpu.yaml", ["judge.bogus=1"])
    # a value that is not YAML, and a sub-key of a single setting: one line naming the --set, no traceback
    with pytest.raises(ConfigError, match=r"^`overrides` a=\[: the value is not valid YAML"):
        load_run_config(path, ["a=["])
    with pytest.raises(ConfigError, match=r"^`overrides` max_iterations\.x=1: max_iterations is a single setting"):
        load_run_config(path, ["max_iterations=2", "max_iterations.x=1"])


@pytest.mark.parametrize(
    "name", ["quickstart-cpu.yaml", "quickstart-pointwise.yaml", "biasscope-qwen.yaml", "trajectories-cpu.yaml"]
)
def test_shipped_experiment_configs_are_valid(name):
    config = load_run_config(Path(__file__).parents[1] / "experiments" / name)
    assert config.max_iterations >= 1 and config.target.spec and config.teacher.spec


# -- defects fixed with the run record (issue 9) ------------------------------------------------


def test_one_seed_reaches_position_swaps_and_every_model_call(tmp_path):
    from bias_discovery.judging import order_for

    config = make_config(tmp_path, seed=7, max_iterations=1)
    rd, _, engine = run_fake(tmp_path, config)
    assert {r.seed for r in engine.sent} <= {7, 8}  # identify re-asks use seed + round
    judged = [r for r in engine.sent if "[Response A]" in r.messages[-1].content and len(r.messages) <= 2]
    assert judged and all(r.seed == 7 for r in judged)
    perturbed = {p.pair_id: p for p in rd.iteration(1).perturbed.read()}
    for j in rd.iteration(1).judgments.read():
        assert [j.order] == order_for(perturbed[j.pair_id].to_pair(), "swap", 7)
    assert rd.baseline.summary.read().seed == 7


def test_a_second_seed_in_the_judge_settings_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"judge.seed \(3\) differs from seed \(7\)"):
        make_config(tmp_path, seed=7, judge={"seed": 3})
    # a config written when judge.seed existed, equal to the run's seed, still loads
    assert make_config(tmp_path, seed=7, judge={"seed": 7, "positions": "swap"}).seed == 7


class RecordingProgress:
    """A progress factory that records (description, total, done) of every step."""

    def __init__(self) -> None:
        self.steps: list[list] = []

    def __call__(self, description, total):
        from contextlib import contextmanager

        @contextmanager
        def step():
            row = [description, total, 0]
            self.steps.append(row)

            def advance(n):
                row[2] += n

            yield advance

        return step()


def test_progress_totals_count_only_what_is_done(tmp_path):
    """Validation judges only valid rewrites: its judge step's total says so (it used to count
    every item, and the bar stopped short, e.g. at 16/24)."""

    def truncating_teacher(request):
        user = request.messages[-1].content
        if "Trait:" in user and "Test question" in user and int(user.split("Test question ")[1].split("?")[0]) % 3 == 0:
            return ""  # an empty rewrite is invalid: it is not judged
        return authority_world(request)

    config = make_config(
        tmp_path,
        max_iterations=1,
        validate={"n_boot": 200, "held_out": 0.0},
        data={
            "target": str(write_pairs(tmp_path / "target.jsonl", 12, "t", "Target question")),
            "test": str(write_pairs(tmp_path / "test.jsonl", 12, "p", "Test question")),
        },
    )
    progress = RecordingProgress()
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(truncating_teacher), progress=progress)
    steps = {description: (total, done) for description, total, done in progress.steps}
    assert steps["iter 1 validate (perturb)"] == (12, 12)
    n_valid = sum(1 for p in rd.iteration(1).validation_perturbed.read() if p.valid)
    assert n_valid == 8 and steps["iter 1 validate (judge)"] == (8, 8)
    for description, total, done in progress.steps:
        if total is not None:
            assert done == total, description
    events = [e for e in rd.read_events() if e["event"] == "progress" and e.get("step") == "judge"]
    assert events[-1]["done"] == events[-1]["total"] == 8


def _cached_fake_run(tmp_path: Path, config: RunConfig, engine: ScriptedEngine) -> RunDir:
    """A finished fake run whose engine goes through the run's call cache (calls.sqlite)."""
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    cached = CachedEngine(engine, rd.cache_path)
    try:
        execute(rd, config, resume=False, engines={"target": cached}, embedder=BagOfWordsEmbedder())
    finally:
        cached.close()
    return rd


@pytest.mark.parametrize(
    "damaged",
    [("checkpoints.sqlite",), ("calls.sqlite",), ("checkpoints.sqlite", "calls.sqlite")],
    ids=["checkpoints", "calls", "both"],
)
def test_damaged_databases_are_named_and_the_advice_works_when_followed(tmp_path, damaged):
    """Resume checks both SQLite files: the message names exactly the damaged ones, its
    commands (run as printed) get the run going, and the failed resume leaves the finished
    run's run.json as it was."""
    config = make_config(tmp_path, max_iterations=1)
    first = ScriptedEngine(authority_world)
    rd = _cached_fake_run(tmp_path, config, first)
    before = rd.library.load_latest()
    state_before = rd.state_path.read_text()
    for name in damaged:
        path = rd.root / name
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])

    result = cli("resume", str(rd.root), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    for name, role in (("checkpoints.sqlite", "the loop's checkpoints"), ("calls.sqlite", "the call cache")):
        if name in damaged:
            assert f"{rd.root / name} ({role}) is damaged" in message
        else:
            assert f"{name} passed SQLite's quick_check" in message and f"{name} ({role}) is damaged" not in message
    assert rd.state_path.read_text() == state_before, "a failed resume rewrote a finished run's run.json"
    assert rd.read_state().status == "finished"

    commands = re.findall(r"`([^`]+)`", message)
    move, resume = commands[0], commands[1]
    assert resume == f"bias-discovery resume {rd.root}"
    subprocess.run(move, shell=True, check=True)  # the advice, as printed
    assert not any((rd.root / f"{name}{suffix}").exists() for name in damaged for suffix in ("", "-wal", "-shm"))
    assert rd.damaged_databases() == {}

    rd.require_resumable()
    again = ScriptedEngine(authority_world)
    cached = CachedEngine(again, rd.cache_path)
    try:
        state = execute(rd, config, resume=True, engines={"target": cached}, embedder=BagOfWordsEmbedder())
    finally:
        cached.close()
    assert state["stage"] == "finished" and rd.read_state().status == "finished"
    assert rd.library.load_latest().same_content(before)
    if damaged == ("checkpoints.sqlite",):
        # restarted from iteration 1; every call it had paid for came from the intact cache
        assert any(e["event"] == "restart" for e in rd.read_events()) and again.sent == []
    elif damaged == ("calls.sqlite",):
        assert again.sent == []  # the checkpoint says the run is finished: nothing left to pay
    else:
        # no cache left: what the restart redoes is paid again (the baseline and placebo files stay)
        assert 0 < len(again.sent) < len(first.sent)


def test_a_failed_resume_of_a_finished_run_keeps_its_status(tmp_path):
    config = make_config(tmp_path, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config)
    state_before = rd.state_path.read_text()
    rd.checkpoint_path.rename(rd.root / "aside.sqlite")  # the loop restarts ... and its teacher falls over

    def crashing(request):
        raise RuntimeError("teacher fell over")

    with pytest.raises(RuntimeError):
        execute(rd, config, resume=True, engines={"target": ScriptedEngine(crashing)}, embedder=BagOfWordsEmbedder())
    assert rd.state_path.read_text() == state_before
    assert [e for e in rd.read_events() if e["event"] == "resume_failed"][-1]["error"] == "teacher fell over"


def test_loop_with_a_mitigated_judge(tmp_path):
    """`judge.mitigation: swap` in a run: every verdict is two calls, both orders; the
    authority world's bias survives the swap (the marker wins in both orders)."""
    config = make_config(tmp_path, judge={"positions": "swap", "mitigation": "swap"}, max_iterations=1)
    rd, state, engine = run_fake(tmp_path, config)
    judgments = rd.iteration(1).judgments.read()
    n_valid = sum(1 for p in rd.iteration(1).perturbed.read() if p.valid)  # unchanged rewrites are not judged
    assert (
        n_valid > 0
        and len(judgments) == 2 * n_valid
        and {j.order for j in judgments} == {"chosen_first", "rejected_first"}
    )
    found = RunDir(rd.root).library.load_latest().by_id("d1-expert-citation-bias")
    assert found.validation.accepted and found.validation.vs_baseline.arm_error == 1.0


def test_the_recursion_limit_covers_every_node_a_run_takes():
    from bias_discovery.loop.graph import NODES_OUTSIDE_ITERATIONS, NODES_PER_ITERATION, recursion_limit, stop_text

    for t in (1, 4, 30):
        assert recursion_limit(t) > NODES_PER_ITERATION * t + NODES_OUTSIDE_ITERATIONS
    assert recursion_limit(4) == 68  # the bound the loop always had (12 per iteration + 20)
    assert stop_text("max_iterations", 3) == "max_iterations (3) reached"


def test_the_loop_logs_each_stage_and_its_decision(tmp_path, caplog):
    """loop/ logs at INFO (what `bias-discovery --verbose` prints): each stage's start and end
    with its calls per role, and each decision to go on or stop, with the reason."""
    with caplog.at_level(logging.INFO, logger="bias_discovery.loop"):
        _, state, _ = run_fake(tmp_path, make_config(tmp_path))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("bias_discovery.loop")]
    assert "iteration 1: perturb started (24 items)" in lines, lines
    assert any(line.startswith("iteration 1: perturb done in ") and "teacher 24" in line for line in lines), lines
    assert "iteration 1: decided to go on" in lines
    assert lines[-1] == f"iteration 2: the loop stops: {state['stop_reason']}"
