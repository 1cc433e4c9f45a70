"""`bias-discovery check`: passes on the embedded model, fails clearly on a server that does not
enforce constraints, on a wrong served name and on an unreachable server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bias_discovery.config import RunConfig
from bias_discovery.preflight import planned_calls

from helpers import cli, free_port

# Small data: the check measures each stage's longest prompts on the model itself.
SMALL = ["--set", "data.target_limit=4", "--set", "data.test_limit=4"]


def server_config(tmp_path: Path, base_url: str | list[str], **model: object) -> Path:
    """The quick-start config with both roles on an OpenAI-compatible server."""
    raw = yaml.safe_load(Path("experiments/quickstart-cpu.yaml").read_text())
    role = {"provider": "openai", "model": "smollm2", "base_url": base_url, **model}
    raw["target"] = dict(role)
    raw["teacher"] = dict(role)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.model
def test_check_passes_with_the_embedded_model() -> None:
    # with a reasoning paragraph, the judge's verdict format is a regex (the quick start asks for the letter only)
    result = cli("check", "experiments/quickstart-cpu.yaml", *SMALL, "--set", "judge.reasoning=true")
    out = result.stdout
    assert result.returncode == 0 and "check passed" in out
    # the smoke check of the embedded transformers engine, before the in-process load
    assert "ok   engine (child process): a batch of 3 constrained replies on cpu in" in out
    assert "regex constraint: enforced" in out  # the judge's verdict format
    assert "json_schema constraint: enforced" in out and "choices constraint: enforced" in out  # teacher
    assert "max_model_len of the engine" in out
    assert "prompt: identify" in out and "<= context 8192" in out
    assert "planned calls" in out and "perturb" in out


@pytest.mark.server
def test_check_passes_on_a_llama_cpp_server(llama_server: str, tmp_path: Path) -> None:
    result = cli("check", str(server_config(tmp_path, llama_server)), *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "'smollm2' is served" in result.stdout and "llamacpp (detected from /models)" in result.stdout
    assert "the server does not report its context" in result.stdout  # llama_cpp.server's /models has no n_ctx


@pytest.mark.server
def test_check_fails_on_a_server_that_ignores_constraints_and_on_a_wrong_name(
    llama_server: str, tmp_path: Path
) -> None:
    # llama_cpp.server ignores `structured_outputs` (vLLM's field) and answers with free text.
    config = server_config(tmp_path, llama_server, structured_outputs="vllm")
    # judge.reasoning=true: the verdict format is then a regex, the constraint this test is about
    result = cli(
        "check",
        str(config),
        "--set",
        "target.model=Qwen/Qwen2.5-7B-Instruct",
        "--set",
        "judge.reasoning=true",
        *SMALL,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # undo rich's line wrapping
    assert "FAIL regex constraint" in out and "FAIL json_schema constraint" in out
    assert f"the model server at {llama_server} does not enforce regex constraints in the 'vllm'" in out
    assert "serves 'smollm2', not 'Qwen/Qwen2.5-7B-Instruct'" in out
    assert "--served-model-name Qwen/Qwen2.5-7B-Instruct" in out
    assert "check failed" in result.stderr


def test_check_fails_on_an_unreachable_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    result = cli("check", str(server_config(tmp_path, url)), *SMALL, check=False)
    assert result.returncode == 1
    assert f"cannot reach model server at {url}/models after 3 attempts" in result.stdout
    assert "ClientConnectorError: Cannot connect to host" in result.stdout


def test_check_refuses_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("target: openai/x\nteacher: openai/x\nmax_iterations: 0\n")
    result = cli("check", str(path), check=False)
    assert result.returncode == 2 and "max_iterations" in result.stderr


def test_planned_calls_follow_the_config() -> None:
    config = RunConfig.model_validate(
        {
            "target": "hf/smollm2",
            "teacher": "hf/smollm2",
            "max_iterations": 3,
            "judge": {"positions": "both"},
            "identify": {"retries": 1},
            "merge": {"top_k": 2},
            "validate": {"max_candidates": 5},
        }
    )
    rows = {r.stage: r for r in planned_calls(config, n_target=10, n_test=7)}
    assert (rows["perturb"].per_iteration, rows["perturb"].total, rows["perturb"].exact) == (10, 30, True)
    assert rows["evaluate"].per_iteration == 20 and not rows["evaluate"].exact  # both orders
    # one case per misjudged pair (10 at most), 2 tries each, and the teacher's confirmation of a name
    assert rows["identify"].per_iteration == 30
    assert rows["check"].per_iteration == 20 and rows["check"].role == "checker"  # each misjudged rewrite, its original
    assert "positions" not in rows  # both orders: the baseline has them
    assert rows["merge"].per_iteration == 20  # top_k 2 questions per candidate, one candidate per case at most
    assert (rows["baseline"].per_iteration, rows["baseline"].total) == (14, 14)  # once per run
    assert rows["validate (perturb)"].per_iteration == 35 and rows["validate (judge)"].per_iteration == 70
    # the placebo arm (the default control) is paid once per run, its answer checks too
    assert (rows["placebo (rewrite)"].total, rows["placebo (judge)"].total, rows["placebo (check)"].total) == (
        7,
        14,
        14,
    )
    assert rows["validate (check)"].per_iteration == 35 + 7
    mitigated = config.model_copy(update={"judge": config.judge.model_copy(update={"mitigation": "shuffle3"})})
    rows = {r.stage: r for r in planned_calls(mitigated, n_target=10, n_test=7)}
    assert rows["evaluate"].per_iteration == 30 and rows["baseline"].total == 21  # 3 calls per verdict
    assert not any(stage.startswith("validate_seeds") for stage in rows)
    one_order = config.model_copy(update={"judge": config.judge.model_copy(update={"positions": "swap"})})
    rows = {r.stage: r for r in planned_calls(one_order, n_target=10, n_test=7)}
    assert (rows["positions"].total, rows["positions"].role) == (7, "target")  # the other order of each test pair
    seeded = config.model_copy(update={"validate_": config.validate_.model_copy(update={"seeds": True})})
    rows = {r.stage: r for r in planned_calls(seeded, n_target=10, n_test=7, n_seeds=7)}
    # 7 seeds, capped by max_candidates=5, on 7 test pairs, once per run
    assert (rows["validate_seeds (perturb)"].total, rows["validate_seeds (judge)"].total) == (35, 70)


@pytest.mark.parametrize("name", ["quickstart-cpu.yaml", "quickstart-pointwise.yaml"])
def test_the_measured_prompts_are_built_for_either_judge_mode(name: str) -> None:
    """`check` measures deeper_explain's longest prompt with the stage's own builder: for a
    pointwise judge that is the rationale of a score (no position; it raised before)."""
    from bias_discovery.config import load_run_config
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.library import load_seed_library
    from bias_discovery.preflight import run_prompts

    config = load_run_config(Path("experiments") / name, ["data.target_limit=2", "data.test_limit=2"])
    d = config.data
    target = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed)
    test = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed)
    prompts = run_prompts(config, target, test, load_seed_library(config.seed_library))
    explain = [p for p in prompts["target"] if p.stage.startswith("deeper_explain")]
    assert config.deeper_explain.enabled and explain
    follow_up = explain[0].request.messages[-1].content
    if config.judge.mode == "pointwise":
        assert f"{config.judge.scale_spec.high:g}" in follow_up and "Response A" not in follow_up
    else:  # the pairwise follow-up names the response the judge picked and the other one
        picked = re.match(r"You preferred Response ([AB])\. ", follow_up)
        assert picked is not None, follow_up
        other = "B" if picked.group(1) == "A" else "A"
        assert f"what in Response {other} made it worse" in follow_up and "score" not in follow_up


def test_check_and_a_run_refuse_an_empty_seed_library_by_name(tmp_path: Path) -> None:
    """An empty seed library is a clear error naming it, in `check` (before: max() of an empty
    sequence while building the teacher's longest prompt) and in a run (before: a ValueError
    from perturb)."""
    from test_loop import make_config, run_fake
    from typer.testing import CliRunner

    from bias_discovery.cli import app
    from bias_discovery.errors import LibraryError

    empty = tmp_path / "empty.json"
    empty.write_text(
        '{"version": 1, "name": "empty", "iteration": 0, "created_at": "2026-11-29T00:00:00+00:00", "biases": []}'
    )
    path = tmp_path / "config.yaml"
    raw = yaml.safe_load(Path("experiments/quickstart-cpu.yaml").read_text())
    path.write_text(yaml.safe_dump({**raw, "seed_library": str(empty)}))
    result = CliRunner().invoke(app, ["check", str(path)], env={"COLUMNS": "200"})
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and f"seed library {empty}: holds no bias" in said, said
    assert isinstance(result.exception, SystemExit)  # typer's exit, not a traceback
    with pytest.raises(LibraryError, match=r"empty\.json: holds no bias"):
        run_fake(tmp_path, make_config(tmp_path, seed_library=str(empty)))
