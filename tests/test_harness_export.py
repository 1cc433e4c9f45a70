"""Harness exports: `export lm-eval` and `export inspect`, loaded and run by the real harnesses.

The sources are a Pro set and a run built with scripted models (seconds). lm-eval builds the
task's requests through `TaskManager(include_path=...)` and scores scripted log-likelihoods
with its own evaluator; inspect_ai runs the task end to end on its mock model. The real-model
tests run the same tasks on SmolLM2: through lm-eval's own `hf` model, and through inspect's
`llama-cpp-python` provider against a real llama_cpp.server.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from test_export import FILTER, WORLD_BIASES, fake_engines, make_bias, make_fake_run
from test_loop import make_config, run_fake

from bias_discovery.export import export_harness
from bias_discovery.export.harness_set import LM_EVAL_TESTED

from helpers import cli, model_cache_dir

needs_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="lm-eval is not installed (./scripts/setup.sh --test installs it)",
)
needs_inspect = pytest.mark.skipif(
    importlib.util.find_spec("inspect_ai") is None,
    reason="inspect-ai is not installed (./scripts/setup.sh --test installs it)",
)


@pytest.fixture()
def pro_set(tmp_path: Path) -> Path:
    """A Pro set exported with scripted models: 6 samples, one per bias of the scripted world."""
    from bias_discovery.export import export_judgebench_pro

    run = make_fake_run(tmp_path / "pro-run", discovered=[make_bias(name, discovered=True) for name in WORLD_BIASES])
    out = tmp_path / "pro"
    export_judgebench_pro(run, out, variants=6, filter_model=FILTER, engines=fake_engines())
    assert len((out / "data.jsonl").read_text().splitlines()) == 6
    return out


@pytest.fixture()
def fake_run(tmp_path: Path) -> Path:
    """A finished scripted run: `d1-expert-citation-bias` accepted on 24 test items."""
    rd, _, _ = run_fake(tmp_path, make_config(tmp_path))
    return rd.root


def _rows(directory: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in (directory / "data.jsonl").read_text().splitlines()]


def _no_machine_paths(directory: Path, *paths: Path) -> None:
    for file in directory.iterdir():
        text = file.read_text(encoding="utf-8")
        for path in paths:
            assert str(path) not in text, f"{file.name} names {path}"


# --------------------------------------------------------------------------------------------
# Sources, files, errors (no harness needed)
# --------------------------------------------------------------------------------------------


def test_a_pro_set_is_exported_as_it_is(pro_set: Path, tmp_path: Path):
    out = tmp_path / "lm"
    result = cli("export", "lm-eval", str(pro_set), "--out", str(out))
    assert "fake_run_pro.yaml (6 samples x 2 orders)" in result.stdout
    assert _rows(out) == _rows(pro_set)
    info = json.loads((out / "export.json").read_text())
    assert info["origin"] == "judgebench-pro" and info["samples"] == 6 and info["task"] == "fake_run_pro"
    assert sum(info["per_bias"].values()) == 6
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "README.md",
            "data.jsonl",
            "export.json",
            "utils.py",
            "fake_run_pro.yaml",
            *(f"{t}.yaml" for t in info["bias_tasks"].values()),
        ]
    )
    card = (out / "README.md").read_text()
    assert "6 samples" in card and "12 documents" in card and f"lm-evaluation-harness {LM_EVAL_TESTED}" in card
    assert "`judgebench_score`" in card and "## Licences" in card and "MIT licence" in card
    _no_machine_paths(out, tmp_path)


def test_a_run_exports_its_validation_rewrites_of_accepted_biases(fake_run: Path, tmp_path: Path):
    out = tmp_path / "inspect"
    cli("export", "inspect", str(fake_run), "--out", str(out), "--task-name", "expert_citation")
    info = json.loads((out / "export.json").read_text())
    assert info["origin"] == "run" and info["task"] == "expert_citation"
    assert info["run_counts"] == {
        "d1-expert-citation-bias": {"iteration": 1, "rewrites": 24, "exported": 24, "excluded": {}}
    }
    rows = _rows(out)
    assert len(rows) == 24 and {r["injected_bias"] for r in rows} == {"d1-expert-citation-bias"}
    for row in rows:
        correct, wrong = (
            (row["response_A"], row["response_B"]) if row["label"] == "A>B" else (row["response_B"], row["response_A"])
        )
        assert correct.startswith("RIGHT") and "experts confirm" in wrong
    assert {r["label"] for r in rows} == {"A>B", "B>A"}  # the seeded coin puts the correct one on both sides
    assert 'TASK_NAME = "expert_citation"' in (out / "task.py").read_text()
    card = (out / "README.md").read_text()
    assert "validation rewrites of a discovery run" in card and "not adversarially filtered" in card
    assert "| `d1-expert-citation-bias` | 1 | 24 | 24 | none |" in card
    _no_machine_paths(out, tmp_path)


def test_bad_sources_and_options_are_refused_and_write_nothing(pro_set: Path, fake_run: Path, tmp_path: Path):
    from bias_discovery.export import ExportError

    out = tmp_path / "out"
    empty = tmp_path / "empty-pro"  # a Pro set without samples: nothing for a harness to run
    empty.mkdir()
    (empty / "data.jsonl").write_text("")
    (empty / "stats.json").write_text((pro_set / "stats.json").read_text())
    cases = [
        ("lm-eval", tmp_path / "missing", {}, "no such directory"),
        ("inspect", tmp_path, {}, "neither a JudgeBench-Pro export"),
        ("lm-eval", pro_set, {"biases": "all"}, "`biases` selects a run's biases"),
        ("lm-eval", fake_run, {"biases": "authority-bias"}, "no validation rewrites of authority-bias"),
        ("inspect", fake_run, {"task_name": "Bad-Name"}, "`task_name` 'Bad-Name'"),
        ("lm-eval", empty, {}, "no samples to export"),
    ]
    for kind, src, options, message in cases:
        with pytest.raises(ExportError, match=re.escape(message)):
            export_harness(kind, src, out, **options)
        assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no staging left over
    # On the command line: exit 2 and one line naming the problem.
    result = cli("export", "lm-eval", str(tmp_path), "--out", str(out), check=False)
    assert result.returncode == 2 and "neither a JudgeBench-Pro export" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3 and not out.exists()  # one message, wrapped by the terminal
    # A non-empty --out needs --overwrite, and is replaced whole with it.
    out.mkdir()
    (out / "old.txt").write_text("x")
    with pytest.raises(ExportError, match="`overwrite`"):
        export_harness("inspect", pro_set, out)
    assert (out / "old.txt").exists()
    export_harness("inspect", pro_set, out, overwrite=True)
    assert not (out / "old.txt").exists() and (out / "task.py").is_file()


# --------------------------------------------------------------------------------------------
# lm-evaluation-harness
# --------------------------------------------------------------------------------------------


def _task_manager(directory: Path) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(directory), include_defaults=False)


def _load(manager: Any, name: str) -> dict[str, Any]:
    """lm-eval's TaskDict of the task, group or tag `name` (``tasks``: name -> Task)."""
    return manager.load([name])


@needs_lm_eval
def test_lm_eval_builds_both_orders_of_every_sample(pro_set: Path, tmp_path: Path):
    out = tmp_path / "lm"
    info = export_harness("lm-eval", pro_set, out)
    rows = {r["sample_id"]: r for r in _rows(out)}
    manager = _task_manager(out)
    name = info.task
    assert {name, f"{name}_per_bias", *info.bias_tasks.values()} <= set(manager.all_tasks)
    task = _load(manager, name)["tasks"][name]
    task.build_all_requests(limit=None, rank=0, world_size=1)
    docs = list(task.eval_docs)
    assert len(docs) == 2 * len(rows) and len(task.instances) == 4 * len(rows)
    for doc in docs:
        row = rows[doc["sample_id"]]
        shown = (doc["first"], doc["second"])
        own = (row["response_A"], row["response_B"])
        assert shown == (own if doc["order"] == "original" else own[::-1])
        assert shown[doc["target"]].startswith("RIGHT")  # the correct response is the target
        requests = [i for i in task.instances if i.doc is doc or i.doc == doc]
        assert [r.arguments[1] for r in requests] == [" A", " B"]
        context = requests[0].arguments[0]
        assert context.startswith("You are a helpful assistant that evaluates")
        assert f"[Response A]\n{shown[0]}\n[End of Response A]" in context and context.endswith(
            "Answer with A or B.\nAnswer:"
        )
    assert {d["order"] for d in docs} == {"original", "swapped"}
    # The per-bias tasks split the samples by injected bias.
    per_bias = _load(manager, f"{name}_per_bias")["tasks"]
    sizes = {}
    for bias_id, bias_task_name in info.bias_tasks.items():
        bias_docs = list(per_bias[bias_task_name].eval_docs)
        assert {d["injected_bias"] for d in bias_docs} == {bias_id}
        sizes[bias_id] = len(bias_docs) // 2
    assert sizes == {k: v for k, v in info.per_bias.items() if v}


def _expected_scores(votes: dict[str, list[int]]) -> dict[str, float]:
    """Hand-computed: acc over verdicts (SE clustered by sample), JudgeBench score over samples."""
    verdicts = [int(v == 1) for vs in votes.values() for v in vs]
    acc = sum(verdicts) / len(verdicts)
    clusters = [sum(int(v == 1) - acc for v in vs) for vs in votes.values()]
    g = len(clusters)
    correct = [int(sum(vs) > 0) for vs in votes.values()]
    return {
        "acc": acc,
        "acc_stderr": math.sqrt(sum(c * c for c in clusters) * g / (g - 1)) / len(verdicts),
        "judgebench_score": sum(correct) / len(correct),
        "judgebench_score_stderr": statistics.stdev(correct) / math.sqrt(len(correct)),
    }


@needs_lm_eval
def test_lm_eval_scores_both_orders_as_judgebench(fake_run: Path, tmp_path: Path):
    """lm-eval's own evaluator over scripted log-likelihoods: four kinds of sample, by question
    number: right in both orders; always "A" (right in one order); wrong in both; an exact tie
    in one order and right in the other (right + no verdict: correct for JudgeBench)."""
    from lm_eval.api.model import LM
    from lm_eval.evaluator import evaluate

    out = tmp_path / "lm"
    info = export_harness("lm-eval", fake_run, out)

    def kind(context: str) -> int:
        return int(context.split("Question:\nQuestion ")[1].split("?")[0]) % 4

    def a_is_right(context: str) -> bool:
        return context.split("[Response A]\n")[1].startswith("RIGHT")

    class Scripted(LM):
        def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            scores = []
            for request in requests:
                context, continuation = request.args
                k, letter = kind(context), continuation.strip()
                right_letter = "A" if a_is_right(context) else "B"
                if k == 0:
                    picked = right_letter
                elif k == 1:
                    picked = "A"
                elif k == 2:
                    picked = "B" if right_letter == "A" else "A"
                else:
                    picked = None if right_letter == "A" else "B"  # a tie where A is right
                scores.append((-1.0 if picked in (None, letter) else -2.0, False))
            return scores

        def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list:
            raise NotImplementedError

        def generate_until(self, requests: list, disable_tqdm: bool = False) -> list:
            raise NotImplementedError

    result = evaluate(Scripted(), _load(_task_manager(out), info.task), bootstrap_iters=100, log_samples=False)
    metrics = result["results"][info.task]
    rows = _rows(out)
    votes: dict[str, list[int]] = {}
    for row in rows:
        k = int(row["question"].split()[1].rstrip("?")) % 4
        votes[row["sample_id"]] = {0: [1, 1], 1: [1, -1], 2: [-1, -1], 3: [0, 1]}[k]
    expected = _expected_scores(votes)
    for metric, value in expected.items():
        assert metrics[f"{metric},none"] == pytest.approx(value), metric
    assert metrics["judgebench_score,none"] == pytest.approx(0.5)  # kinds 0 and 3 of 4
    assert metrics["acc,none"] == pytest.approx(0.5)  # (2 + 1 + 0 + 1) / 8


@needs_lm_eval
@pytest.mark.model
def test_lm_eval_runs_the_task_on_real_smollm2(fake_run: Path, tmp_path: Path):
    """lm-eval's own `hf` model (SmolLM2 in Hugging Face format, CPU) on 4 samples x 2 orders;
    the harness's scores equal the ones recomputed from its logged log-likelihoods."""
    import lm_eval

    from bias_discovery.smollm2_hf import build_hf_smollm2

    # An EngineError here (a failed conversion, or its packages missing: ./scripts/setup.sh
    # --vllm-cpu installs them) fails the test: an engine that does not work is not a skip.
    model_dir = build_hf_smollm2(model_cache_dir())
    out = tmp_path / "lm"
    info = export_harness("lm-eval", fake_run, out)
    name = info.task
    result = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},dtype=float32",
        tasks=[name],
        task_manager=_task_manager(out),
        limit=8,
        device="cpu",
        batch_size=4,
        log_samples=True,
        bootstrap_iters=0,
    )
    metrics = result["results"][name]
    samples = result["samples"][name]
    assert len(samples) == 8
    votes: dict[str, list[int]] = {}
    for s in samples:
        (a, _), (b, _) = s["filtered_resps"]
        vote = 0 if a == b else (1 if (0 if a > b else 1) == s["doc"]["target"] else -1)
        votes.setdefault(s["doc"]["sample_id"], []).append(vote)
    assert len(votes) == 4 and all(len(v) == 2 for v in votes.values())  # both orders of each sample
    expected = _expected_scores(votes)
    print("SmolLM2 on the exported lm-eval task:", {k: metrics[f"{k},none"] for k in expected})
    for metric, value in expected.items():
        assert metrics[f"{metric},none"] == pytest.approx(value), metric


# --------------------------------------------------------------------------------------------
# inspect_ai
# --------------------------------------------------------------------------------------------


def _load_task_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"exported_task_{abs(hash(path))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_inspect_log(log: Any, rows: list[dict[str, str]]) -> dict[str, float]:
    """Every sample's score agrees with its own completion and target; the metrics agree with
    the scores. Returns the metrics."""
    assert log.status == "success", log.error
    by_id = {r["sample_id"]: r for r in rows}
    votes: dict[str, list[int]] = {}
    for sample in log.samples:
        value = sample.scores["pairwise_verdict"].value
        completion = sample.output.completion
        answer = completion.split("ANSWER:")[1].strip()[:1] if "ANSWER:" in completion else None
        expected_vote = 0 if answer not in ("A", "B") else (1 if answer == sample.target else -1)
        assert value == {
            "right": int(expected_vote == 1),
            "vote": expected_vote,
            "invalid": int(answer not in ("A", "B")),
        }
        row = by_id[sample.metadata["sample_id"]]
        correct = row["response_A"] if row["label"] == "A>B" else row["response_B"]
        assert sample.choices["AB".index(sample.target)] == correct
        votes.setdefault(sample.metadata["sample_id"], []).append(expected_vote)
    metrics = {m: v.value for score in log.results.scores for m, v in score.metrics.items()}
    verdicts = [v for vs in votes.values() for v in vs]
    correct_samples = [int(sum(vs) > 0) for vs in votes.values()]
    assert metrics["accuracy"] == pytest.approx(sum(v == 1 for v in verdicts) / len(verdicts))
    assert metrics["mean"] == pytest.approx(sum(v == 0 for v in verdicts) / len(verdicts))
    assert metrics["judgebench_score"] == pytest.approx(sum(correct_samples) / len(correct_samples))
    if len(correct_samples) > 1:
        assert metrics["judgebench_score_stderr"] == pytest.approx(
            statistics.stdev(correct_samples) / math.sqrt(len(correct_samples))
        )
    return metrics


@needs_inspect
def test_inspect_task_runs_end_to_end_on_the_mock_model(pro_set: Path, tmp_path: Path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage

    out = tmp_path / "inspect"
    info = export_harness("inspect", pro_set, out)
    rows = _rows(out)
    # mockllm's default reply counts tokens with tiktoken, which downloads its encoding: give
    # it replies with their usage. The replies cycle through A, B and no verdict (in whatever
    # order inspect runs the samples; each sample is checked against its own reply).
    texts = ["ANSWER: A", "ANSWER: B", "Both responses are fine."]
    outputs = []
    for i in range(2 * len(rows)):
        output = ModelOutput.from_content(model="mockllm/model", content=texts[i % 3])
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        outputs.append(output)
    logs = inspect_eval(
        f"{out / 'task.py'}@{info.task}",
        model="mockllm/model",
        model_args={"custom_outputs": outputs},
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    log = logs[0]
    assert log.eval.task == info.task and len(log.samples) == 2 * len(rows)
    assert {s.id.rsplit("::", 1)[1] for s in log.samples} == {"original", "swapped"}
    prompt = log.samples[0].messages[0].text
    assert "Which response is more helpful and accurate?" in prompt and "ANSWER: $LETTER" in prompt
    metrics = _check_inspect_log(log, rows)
    assert metrics["mean"] == pytest.approx(1 / 3)
    # -T bias=ID keeps the samples of one injected bias; an unknown one is an error.
    module = _load_task_module(out / "task.py")
    bias_id = rows[0]["injected_bias"]
    one = module.pairwise_judging(bias=bias_id)
    assert len(one.dataset) == 2 * sum(r["injected_bias"] == bias_id for r in rows)
    assert {s.metadata["injected_bias"] for s in one.dataset} == {bias_id}
    with pytest.raises(ValueError, match="no samples with injected_bias 'nope'"):
        module.pairwise_judging(bias="nope")


@needs_inspect
def test_an_exported_inspect_log_audits_back_with_every_bias_variant(pro_set: Path, tmp_path: Path):
    """Issue 47: the .eval log of our own `export inspect` task audits back through `audit
    --from-log`, each bias variant of a source pair a pair of its own (the variants share the
    source's pair_id). The mock judge always answers A: every verdict goes to the first shown."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage

    from bias_discovery.api import audit_log

    out = tmp_path / "inspect"
    info = export_harness("inspect", pro_set, out)
    rows = _rows(out)
    for row in rows[1:3]:  # two variants of the first row's source pair, as a run with many biases gives
        row["pair_id"] = rows[0]["pair_id"]
    (out / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    outputs = []
    for _ in range(2 * len(rows)):
        output = ModelOutput.from_content(model="mockllm/model", content="ANSWER: A")
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        outputs.append(output)
    (log,) = inspect_eval(
        f"{out / 'task.py'}@{info.task}",
        model="mockllm/model",
        model_args={"custom_outputs": outputs},
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "success"
    (eval_file,) = (tmp_path / "logs").glob("*.eval")
    report = audit_log(eval_file, n_boot=100).report
    position = next(b for b in report.biases if b.id == "position")
    assert report.from_log.format == "inspect" and report.from_log.rows == 2 * len(rows)
    assert position.z.n == len(rows) and position.first_win_rate.value == 1.0


@needs_inspect
def test_inspect_judgebench_score_counts_a_missing_verdict_as_no_vote(pro_set: Path, tmp_path: Path):
    """The exported metrics on hand-made scores: right + missing is a correct sample, right +
    wrong is not (JudgeBench's net vote)."""
    from inspect_ai.scorer import SampleScore, Score

    out = tmp_path / "inspect"
    export_harness("inspect", pro_set, out)
    module = _load_task_module(out / "task.py")

    def scores(votes: dict[str, list[int]]) -> list[SampleScore]:
        return [
            SampleScore(score=Score(value=v), sample_id=f"{sid}::{i}", sample_metadata={"sample_id": sid})
            for sid, vs in votes.items()
            for i, v in enumerate(vs)
        ]

    votes = {"s1": [1, 0], "s2": [1, -1], "s3": [1, 1], "s4": [0, 0]}
    assert module.judgebench_score()(scores(votes)) == pytest.approx(0.5)
    assert module.judgebench_score_stderr()(scores(votes)) == pytest.approx(statistics.stdev([1, 0, 1, 0]) / 2)


@needs_inspect
@pytest.mark.server
def test_inspect_task_runs_on_a_real_llama_cpp_server(fake_run: Path, tmp_path: Path, llama_server: str):
    """inspect's llama-cpp-python provider against a real llama_cpp.server with SmolLM2 (which
    rarely answers in the ANSWER format: missing verdicts are scored, not errors)."""
    from inspect_ai import eval as inspect_eval

    out = tmp_path / "inspect"
    info = export_harness("inspect", fake_run, out)
    log = inspect_eval(
        f"{out / 'task.py'}@{info.task}",
        model="llama-cpp-python/smollm2",
        model_base_url=llama_server,
        log_dir=str(tmp_path / "logs"),
        display="none",
        limit=6,
        max_tokens=16,
        temperature=0.0,
        max_connections=2,
    )[0]
    assert len(log.samples) == 6 and all(s.output.completion for s in log.samples)
    metrics = _check_inspect_log(log, _rows(out))
    print("SmolLM2 on the exported inspect task:", metrics)
