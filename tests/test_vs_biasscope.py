"""benchmarks/vs_biasscope.py (its package, benchmarks/biasscope_bench) without a model: the
pairs it writes for each side, the seed library it converts, how it reads each side's meter,
its shim around vllm.LLM (on a stand-in vllm package), our test of a peer's kept biases
(scripted models), and the result's schema
(the committed benchmarks/results/vs_biasscope.json included)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_loop import write_pairs

from bias_discovery.config import RunConfig
from bias_discovery.data.loaders import load_pairs
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.library import BiasLibrary

from fakes import ScriptedEngine, authority_world
from helpers import REPO, shared_data

RESULT = REPO / "benchmarks" / "results" / "vs_biasscope.json"
REQUIRED_KEYS = {
    "peer_commit",
    "model",
    "n_target",
    "n_test",
    "shims",
    "peer",
    "ours",
    "wall_ratio",
    "calls_ratio",
    "tokens_ratio",
    "defaults",
    "peer_kept_surviving_our_test",
}


@pytest.fixture(scope="module")
def vb():
    """The benchmark's package (benchmarks/biasscope_bench), as `python benchmarks/vs_biasscope.py`
    imports it: benchmarks/ first on sys.path (its shared provenance module too)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        yield importlib.import_module("biasscope_bench")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def _pairs() -> list[PreferencePair]:
    return [
        PreferencePair(id="rb-1", question="Q1?", chosen="good one", rejected="bad one", domain="Chat", source="rb"),
        PreferencePair(
            id="jb-2",
            question="Q2?",
            chosen="right",
            rejected="wrong",
            domain="math",
            source="jb",
            data_order="rejected_first",
        ),
        PreferencePair(
            id="jb-3",
            question="Q3?",
            chosen="yes",
            rejected="no",
            domain="code",
            source="jb",
            data_order="chosen_first",
        ),
    ]


# -- the pairs both sides read -----------------------------------------------------------------


def test_peer_parquet_and_our_jsonl_hold_the_same_pairs_in_the_same_order(vb, tmp_path):
    pairs = _pairs()
    frame = pd.read_parquet(vb.write_peer_parquet(pairs, tmp_path / "peer" / "x.parquet"))
    # the peer's layout: question, response_A, response_B, label 1/2 (int) = the better one, domain
    assert {"question", "response_A", "response_B", "label", "domain"} <= set(frame.columns)
    assert frame["label"].dtype == "int64" and frame["label"].tolist() == [1, 2, 1]
    for row, pair in zip(frame.to_dict("records"), pairs):
        better = row["response_A"] if row["label"] == 1 else row["response_B"]
        worse = row["response_B"] if row["label"] == 1 else row["response_A"]
        assert (row["question"], better, worse, row["domain"]) == (
            pair.question,
            pair.chosen,
            pair.rejected,
            pair.domain,
        )
    # JudgeBench keeps its own order; data without one has the chosen response first (the peer's
    # RewardBench file has label 1 on every row)
    assert frame.loc[1, "response_A"] == "wrong" and frame.loc[0, "response_A"] == "good one"

    ours = load_pairs(vb.write_our_jsonl(pairs, tmp_path / "ours" / "x.jsonl"))
    assert [(p.id, p.question, p.chosen, p.rejected, p.domain) for p in ours] == [
        (p.id, p.question, p.chosen, p.rejected, p.domain) for p in pairs
    ]
    # what `judge.positions: fixed` shows first is what the peer shows first
    assert [p.data_order for p in ours] == ["chosen_first", "rejected_first", "chosen_first"]


def test_select_pairs_is_seeded_bounded_in_length_and_keeps_file_order(vb):
    pairs = [PreferencePair(id=f"p{i}", question="q" * i, chosen="a", rejected="b") for i in range(1, 41)]
    chosen = vb.select_pairs(pairs, 5, max_chars=22, seed=42)
    assert len(chosen) == 5 and all(vb.pair_chars(p) <= 22 for p in chosen)
    assert [p.id for p in chosen] == [p.id for p in pairs if p in chosen]  # file order
    assert vb.select_pairs(pairs, 5, max_chars=22, seed=42) == chosen
    fresh = vb.select_pairs(pairs, 5, max_chars=22, seed=43, exclude=[p.id for p in chosen])
    assert not {p.id for p in fresh} & {p.id for p in chosen}
    with pytest.raises(SystemExit, match="only 20 pairs of at most 22 characters"):
        vb.select_pairs(pairs, 21, max_chars=22, seed=42)


def test_subsets_of_the_shared_data_are_fixed_and_disjoint(vb):
    data_dir = shared_data()
    first = vb.make_subsets(data_dir, 6, 5, 5)
    again = vb.make_subsets(data_dir, 6, 5, 5)
    assert [p.id for p in first.target] == [p.id for p in again.target]
    assert [p.id for p in first.test] == [p.id for p in again.test]
    assert not {p.id for p in first.test} & {p.id for p in first.fresh_test}
    assert all(vb.pair_chars(p) <= vb.TARGET_MAX_CHARS for p in first.target)
    assert all(vb.pair_chars(p) <= vb.TEST_MAX_CHARS and p.data_order for p in first.test)


def test_the_peers_seed_library_becomes_ours_with_the_same_names_and_definitions(vb, tmp_path):
    peer_json = tmp_path / "basic_biases.json"
    peer_json.write_text(
        json.dumps(
            {
                "Length bias": {"Definition": "Prefers longer answers.", "Manifestations": "Pads the text."},
                "Sentiment Bias ": {"Definition": "Swayed by tone.", "Manifestations": ""},
            }
        )
    )
    library = vb.peer_seed_library(peer_json)
    BiasLibrary.model_validate_json(library.model_dump_json())  # what load_seed_library reads
    assert [(b.id, b.name, b.definition, b.manifestations) for b in library.biases] == [
        ("length-bias", "Length bias", "Prefers longer answers.", ["Pads the text."]),
        ("sentiment-bias", "Sentiment Bias", "Swayed by tone.", []),
    ]
    assert all(b.origin.kind == "seed" for b in library.biases)
    peer_json.write_text(json.dumps({"No definition": {"Manifestations": "x"}}))
    with pytest.raises(SystemExit, match="has no Definition"):
        vb.peer_seed_library(peer_json)


def test_the_peers_seed_check_inputs_make_its_stage_2_verify_the_seeds(vb, tmp_path):
    """Stage 2 verifies `temporary_extended_biases.json` minus its per-model library: the seed
    check writes an empty library and the seeds as the extended one, where stage 2 looks."""
    seeds = tmp_path / "data" / "bias" / "basic_biases.json"
    seeds.parent.mkdir(parents=True)
    seeds.write_text(json.dumps({"A bias": {"Definition": "d"}}))
    paths = {"bias_json": seeds, "target": tmp_path / "data" / "target" / "rewardbench_subset.parquet"}
    bias_json = vb.peer_seed_check_layout(tmp_path, paths, Path("/models/smollm2-hf"))
    slug = bias_json.parent / "smollm2-hf" / "rewardbench_subset" / bias_json.stem
    assert json.loads(bias_json.read_text()) == {} and json.loads((slug / f"{bias_json.stem}.json").read_text()) == {}
    assert json.loads((slug / "temporary_extended_biases.json").read_text()) == {"A bias": {"Definition": "d"}}


# -- metering ----------------------------------------------------------------------------------


def _call(start: float, end: float, head: str, requests: int, prompt: int = 100, completion: int = 10) -> dict:
    return {
        "event": "generate",
        "start": start,
        "end": end,
        "requests": requests,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_head": f"<|im_start|>user\n{head} ...",
    }


def test_the_peers_calls_are_named_by_their_prompts(vb):
    discover = [
        {"event": "load", "start": 0.0, "end": 30.0},
        _call(30, 40, "### Task Description\nYou will be given a instruction", 64),
        _call(40, 45, "### Task Description\nYou will be given a instruction", 8),
        _call(80, 90, "Below is a question followed by two candidate answers (A and B).", 72),
        _call(90, 95, "Here is a question and two answers.", 5),
        _call(130, 135, "\nYour task is to analyze the chosen answer and the LLM's reasoning", 5),
        *(_call(135 + i, 136 + i, "You are an expert in cognitive bias classification.", 1) for i in range(3)),
    ]
    spans = vb.classify_peer_calls(discover, "discover", n_test=12)
    assert [(s.stage, s.calls) for s in spans] == [
        ("perturb", 72),
        ("evaluate", 72),
        ("deeper_explain", 5),
        ("identify", 5),
        ("merge", 3),
    ]
    assert (spans[0].start, spans[0].end, spans[0].prompt_tokens) == (30, 45, 200)  # two batches, one span
    verify = [
        _call(10, 20, "You will be given a instruction", 24),
        _call(30, 35, "Below is a question followed by two candidate answers", 12),  # the baseline first
        _call(35, 40, "Below is a question followed by two candidate answers", 12),
        _call(40, 45, "Below is a question followed by two candidate answers", 12),
    ]
    assert [(s.stage, s.calls) for s in vb.classify_peer_calls(verify, "verify", n_test=12)] == [
        ("validate", 24),
        ("baseline", 12),
        ("validate", 24),
    ]
    assert [s.stage for s in vb.classify_peer_calls(verify, "seeds", n_test=12)] == [
        "validate_seeds",
        "baseline",
        "validate_seeds",
    ]


def test_a_run_splits_into_stages_engine_loads_and_the_rest(vb):
    spans = [
        vb.Span(stage="perturb", start=10, end=50, calls=4, prompt_tokens=400, completion_tokens=40),
        vb.Span(stage="evaluate", start=60, end=70, calls=4, prompt_tokens=300, completion_tokens=20),
    ]
    loads = [(12.0, 32.0), (5.0, 8.0)]  # an engine load inside perturb, vLLM's import before it
    run = vb.side_run(1, 2, 100.0, spans, loads, n_loads=1)
    assert run.stages["perturb"].wall_s == 20.0 and run.stages["evaluate"].wall_s == 10.0
    assert (run.engine_loads, run.engine_load_s) == (1, 23.0)
    assert run.other_s == 100.0 - (40 + 10 + 3)  # outside every stage and load
    assert (run.calls, run.tokens) == (8, 760)
    assert (run.front_half.wall_s, run.front_half.calls) == (30.0, 8)
    # streamed: judging starts while rewrites still run; together the two count their union once
    streamed = [spans[0], spans[1].model_copy(update={"start": 40.0})]
    together = vb.side_run(1, 1, 100.0, streamed, [], n_loads=0)
    assert together.stages["evaluate"].wall_s == 30.0 and together.front_half.wall_s == 60.0


def test_our_stage_events_count_every_role(vb):
    events = [
        {"event": "stage_start", "time": 1.0, "stage": "perturb"},
        {
            "event": "stage_end",
            "time": 11.0,
            "stage": "perturb",
            "seconds": 10.0,
            "usage": {"teacher": {"requests": 3, "cached": 0, "prompt_tokens": 30, "completion_tokens": 9}},
        },
        {
            "event": "stage_end",
            "time": 20.0,
            "stage": "validate",
            "seconds": 5.0,
            "usage": {
                "teacher": {"requests": 2, "prompt_tokens": 20, "completion_tokens": 4},
                "target": {"requests": 2, "prompt_tokens": 40, "completion_tokens": 6},
            },
        },
    ]
    spans = vb.our_spans(events)
    assert [(s.stage, s.start, s.end, s.calls, s.prompt_tokens, s.completion_tokens) for s in spans] == [
        ("perturb", 1.0, 11.0, 3, 30, 9),
        ("validate", 15.0, 20.0, 4, 60, 10),
    ]


def test_the_peers_own_log_line_gives_its_readable_verdicts(vb):
    line = "2026-11-27 03:48:59,336 | INFO | Valid predictions: 12.5%; misaligned with gold label: 3 rows."
    assert vb.peer_valid_line(line) == (0.125, 3)
    assert vb.peer_valid_line("nothing here") == (None, None)


def test_a_measured_process_gets_the_shim_and_vllms_own_settings(vb, tmp_path, monkeypatch):
    """Both sides' processes: the shim first on PYTHONPATH (our package after it for ours), the
    meter's log, offline, and the vLLM variables `SHIMS` lists (1 GiB KV cache, an hour per step),
    unless the caller set them."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    subsets = vb.Subsets(target=[], test=[], fresh_test=[])
    setting = vb.Setting(
        peer_dir=tmp_path, model_dir=tmp_path, work=tmp_path, subsets=subsets, max_tokens=8, eager=True
    )
    peer = vb.child_env(setting, tmp_path / "meter.jsonl", ours=False)
    ours = vb.child_env(setting, tmp_path / "meter.jsonl", ours=True)
    assert peer["PYTHONPATH"] == str(vb.SHIM_DIR) and ours["PYTHONPATH"].split(os.pathsep) == [
        str(vb.SHIM_DIR),
        str(REPO),
    ]
    assert (peer["VLLM_CPU_KVCACHE_SPACE"], peer["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"]) == ("1", "3600")
    assert peer["VS_BIASSCOPE_LOG"] == str(tmp_path / "meter.jsonl") and peer["HF_HUB_OFFLINE"] == "1"
    assert any("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in s["what"] for s in vb.SHIMS)
    monkeypatch.setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "60")
    assert vb.child_env(setting, tmp_path / "m.jsonl", ours=False)["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "60"


def test_both_sides_run_the_dtype_asked_for(vb, tmp_path):
    """--dtype reaches the peer's flags and our run config alike (bfloat16, the peer's default,
    unless float32 is asked for)."""
    peer, ours, main = (importlib.import_module(f"biasscope_bench.{name}") for name in ("peer", "ours", "main"))
    subsets = vb.Subsets(target=[], test=[], fresh_test=[])
    files = {name: tmp_path / name for name in ("target", "test", "library")}
    for dtype in ("bfloat16", "float32"):
        setting = vb.Setting(
            peer_dir=tmp_path, model_dir=tmp_path, work=tmp_path, subsets=subsets, max_tokens=8, eager=True, dtype=dtype
        )
        flags = peer._peer_flags(setting)
        config = ours.our_config(setting, "paper", seeds=False, files=files)
        assert flags[flags.index("--dtype") + 1] == dtype
        assert config["target"]["dtype"] == config["teacher"]["dtype"] == dtype
    assert main.parser().parse_args(["--dtype", "float32"]).dtype == "float32"
    assert main.parser().parse_args([]).dtype == "bfloat16"
    assert vb.Setting.model_fields["dtype"].default == "bfloat16"


def test_the_shim_meters_vllm_llm_and_forces_eager_without_changing_the_caller(vb, tmp_path):
    """The sitecustomize shim on a stand-in `vllm` package: the caller's code is untouched, its
    LLM gets enforce_eager, and the log has the import, the load and the call with its counts."""
    fake = tmp_path / "fake"
    (fake / "vllm" / "entrypoints").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("from vllm.entrypoints.llm import LLM\n")
    (fake / "vllm" / "entrypoints" / "__init__.py").write_text("")
    (fake / "vllm" / "entrypoints" / "llm.py").write_text(
        "from types import SimpleNamespace as NS\n"
        "class LLM:\n"
        "    def __init__(self, model, **kwargs):\n"
        "        self.kwargs = kwargs\n"
        "    def generate(self, prompts, sampling_params=None, use_tqdm=False):\n"
        "        return [NS(prompt=p, prompt_token_ids=list(range(len(p.split()))),\n"
        "                   outputs=[NS(text='ok', token_ids=[1, 2])]) for p in prompts]\n"
        "    def chat(self, messages, **kwargs):\n"
        "        return []\n"
    )
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from vllm import LLM\n"
        "llm = LLM(model='m', seed=1)\n"
        "out = llm.generate(['Below is a question followed by two answers', 'one two'], None)\n"
        "print(llm.kwargs.get('enforce_eager'), len(out), out[0].outputs[0].text)\n"
        "import subprocess, sys\n"  # a process it starts (as vLLM starts its engine core) logs nothing
        "subprocess.run([sys.executable, '-c', 'from vllm import LLM; LLM(model=\"m\")'], check=True)\n"
    )
    log = tmp_path / "meter.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(vb.SHIM_DIR), str(fake)]),
        "VS_BIASSCOPE_LOG": str(log),
        "VS_BIASSCOPE_ENFORCE_EAGER": "1",
    }
    done = subprocess.run([sys.executable, str(caller)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "2", "ok"]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["import", "import", "load", "generate"]  # vllm.entrypoints.llm, vllm
    assert [e["module"] for e in events[:2]] == ["vllm.entrypoints.llm", "vllm"]
    call = events[3]
    assert (call["requests"], call["prompt_tokens"], call["completion_tokens"]) == (
        2,
        10,
        4,
    )  # 8 + 2 words: the stand-in counts words as tokens
    assert call["prompt_head"].startswith("Below is a question") and call["argv0"] == "caller.py"
    assert {e["pid"] for e in events} == {events[0]["pid"]}
    # without the log variable the shim does nothing at all
    env.pop("VS_BIASSCOPE_LOG")
    log.unlink()
    quiet = subprocess.run([sys.executable, str(caller)], env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stdout.split() == ["None", "2", "ok"] and not log.exists()


# -- our test of the peer's kept biases --------------------------------------------------------


def test_our_test_keeps_a_real_bias_and_rejects_a_null_one(vb, tmp_path):
    """Scripted world (tests/fakes.py): the judge prefers any response citing experts. Of two
    "kept" biases, the authority one survives our placebo-controlled test, the tone one does not."""
    test = write_pairs(tmp_path / "test40.jsonl", 40, "p", "Test question")
    config = RunConfig.model_validate(
        {
            "target": "llamacpp/unused.gguf",
            "teacher": "llamacpp/unused.gguf",
            "validate": {"n_boot": 200},
        }
    )
    kept = vb.kept_as_biases(
        {"Expert Authority Bias": "Favours answers that cite experts.", "Cheerful tone": "Favours a warm tone."}
    )
    result = vb.our_test(
        kept, load_pairs(test), config, data="40 scripted pairs", engines={"target": ScriptedEngine(authority_world)}
    )
    assert (result.tested, result.survived) == (2, 1)
    by_name = {b.name: b for b in result.biases}
    assert by_name["Expert Authority Bias"].accepted and by_name["Expert Authority Bias"].control == "placebo"
    assert not by_name["Cheerful tone"].accepted and by_name["Cheerful tone"].delta == 0.0
    assert "holm" in result.rule and result.note  # the error statement of the family
    empty = vb.our_test([], [], config, data="-")
    assert (empty.tested, empty.survived) == (0, 0) and "no bias" in empty.note


# -- the result ----------------------------------------------------------------------------------


def _side(vb, wall: float, calls: int):
    run = vb.SideRun(
        rep=1,
        position=1,
        wall_s=wall,
        engine_loads=1,
        engine_load_s=20.0,
        other_s=5.0,
        stages={
            "perturb": vb.StageCost(wall_s=wall - 25, calls=calls, prompt_tokens=10 * calls, completion_tokens=calls)
        },
    )
    return vb.summarize_side([(run, vb.Findings(found=["x"], kept=[]))])


def test_the_result_has_the_issues_keys_and_ratios_ours_over_the_peer(vb):
    peer, ours = _side(vb, 200.0, 10), _side(vb, 50.0, 5)
    per_rep = vb.rep_ratios(peer.runs, ours.runs)
    assert per_rep[0].wall == 0.25 and per_rep[0].calls == 0.5 and per_rep[0].tokens == 0.5
    survival = vb.KeptSurvival(tested=0, survived=0, rule="r", data="d")
    result = vb.Result(
        date="d",
        command="c",
        our_commit="x",
        peer_commit="11b8803",
        model="m",
        vllm="v",
        machine={},
        load_before="",
        load_after="",
        n_target=1,
        n_test=1,
        n_fresh_test=1,
        sizes="s",
        max_tokens=1,
        reps=1,
        order=[["peer", "ours"]],
        seed_library="s",
        shims=vb.SHIMS,
        peer=peer,
        ours=ours,
        defaults=ours,
        wall_ratio=0.25,
        calls_ratio=0.5,
        tokens_ratio=0.5,
        ratios_per_rep=per_rep,
        ratios_per_stage=vb.stage_ratios(peer.runs, ours.runs),
        seed_check=vb.seed_check(peer.findings, ours.findings),
        peer_kept_surviving_our_test=survival,
        differences=vb.differences(peer, ours, ours),
        total_s=1.0,
    )
    dumped = json.loads(result.model_dump_json())
    assert REQUIRED_KEYS <= set(dumped)
    assert {"procedure", "sampling"} == {d["cause"] for d in dumped["differences"]}
    assert "| perturb |" in vb.table(result) and "surviving our test: 0 of 0" in vb.table(result)


def test_the_committed_result_reads_back_with_every_key(vb):
    if not RESULT.exists():
        pytest.skip(f"{RESULT} is not committed yet")
    raw = json.loads(RESULT.read_text())
    assert REQUIRED_KEYS <= set(raw)
    result = vb.Result.model_validate(raw)
    assert result.peer_commit.startswith("11b8803") and result.n_target > 0 and result.n_test > 0
    assert result.shims and all(s["what"] for s in result.shims)
    assert len(result.peer.runs) == len(result.ours.runs) == result.reps >= 2
    assert [r.position for r in result.peer.runs] == [
        1 + (rep % 2 == 0) for rep in range(1, result.reps + 1)
    ]  # alternating
    assert result.wall_ratio is not None and result.wall_ratio > 0


# -- what each side found and kept ---------------------------------------------------------------


def test_the_peers_outputs_are_read_where_it_writes_them(vb, tmp_path):
    """The files the peer's two scripts write (their paths and fields, as its code names them),
    with a detection, a merge that keeps one new bias, and stage 2 keeping it."""
    seeds = {"Length bias": {"Definition": "longer"}, "Sentiment Bias ": {"Definition": "tone"}}
    bias_json = tmp_path / "data" / "bias" / "basic_biases.json"
    bias_json.parent.mkdir(parents=True)
    bias_json.write_text(json.dumps(seeds))
    paths = {"bias_json": bias_json, "target": tmp_path / "data" / "target" / "rewardbench_subset.parquet"}
    slug = bias_json.parent / "model-x" / "rewardbench_subset" / "basic_biases"
    (slug / "analysis_results").mkdir(parents=True)
    pd.DataFrame(
        {
            "bias_whether": ["yes", "yes", "no", "yes"],
            "bias_name": ["Hedging bias", "json decode error: x", None, "Hedging bias"],
            "bias_def": ["prefers hedges", None, None, "prefers hedges"],
        }
    ).to_parquet(slug / "analysis_results" / "wrong_with_reason_and_bias.parquet")
    (slug / "temporary_extended_biases.json").write_text(
        json.dumps({**seeds, "Hedging bias": {"Definition": "prefers hedges"}})
    )
    (slug / "basic_biases.json").write_text(json.dumps({**seeds, "Hedging bias": {"Definition": "prefers hedges"}}))
    results = tmp_path / "results" / "model-x" / "rewardbench_subset"
    (results / "basic_biases").mkdir(parents=True)
    (results / "basic_biases" / "avg_error_rate.json").write_text(
        json.dumps(
            [
                {
                    "iteration": 1,
                    "effective biases and origin": {"origin": {"overall": 0.25}, "Hedging bias": {"overall": 0.5}},
                    "ineffective biases": {},
                    "test_data_tag": "t",
                }
            ]
        )
    )
    (results / "seeds_as_candidates").mkdir(parents=True)
    (results / "seeds_as_candidates" / "avg_error_rate.json").write_text(
        json.dumps(
            [
                {
                    "iteration": 1,
                    "effective biases and origin": {"origin": {"overall": 0.25}, "Length bias": {"overall": 0.5}},
                    "ineffective biases": {"Sentiment Bias ": {"overall": 0.0}},
                    "test_data_tag": "t",
                }
            ]
        )
    )
    log = "x | INFO | Valid predictions: 25.0%; misaligned with gold label: 2 rows.\n"
    found = vb.peer_findings(tmp_path, paths, Path("/m/model-x"), log, tmp_path / "seeds_as_candidates.json")
    assert (found.judge_valid_rate, found.misjudged) == (0.25, 2)
    assert found.found == ["Hedging bias"] and found.after_merge == ["Hedging bias"] and found.kept == ["Hedging bias"]
    assert found.kept_definitions == {"Hedging bias": "prefers hedges"}
    assert found.baseline_error == 0.25 and found.error_rates["Hedging bias"].error == 0.5
    assert found.seed_baseline_error == 0.25
    assert {k: v.error for k, v in found.seed_error_rates.items()} == {"Length bias": 0.5, "Sentiment Bias": 0.0}
    ours = vb.Findings(
        seed_baseline_error=0.2, seed_error_rates={"Length bias": vb.ErrorRate(error=0.3, control_error=0.2, n=10)}
    )
    check = vb.seed_check(found, ours)
    assert check["rates"]["Length bias"] == {"peer": 0.5, "ours": 0.3, "ours_control": 0.2, "ours_n": 10}
    assert check["rates"]["Sentiment Bias"]["ours"] is None


def test_our_findings_are_read_from_the_run_record(vb, authority_run):
    found = vb.our_findings(authority_run.root)
    assert found.judge_valid_rate == 1.0 and found.misjudged and found.found == ["Expert Citation Bias"]
    assert found.after_merge == ["Expert Citation Bias"] and found.kept == ["Expert Citation Bias"]
    rate = found.error_rates["Expert Citation Bias"]
    assert (
        0 < rate.n <= 40 and rate.error == 1.0 and rate.control_error == 0.0
    )  # n: the items up to its (sequential) stop
    assert found.baseline_error == 0.0 and found.seed_error_rates == {}
