"""`check`'s estimate: expected calls, prompt and completion tokens and dollars per stage and
role beside bounds that assume nothing (`preflight.estimate_run`)."""

from __future__ import annotations

import pytest

from bias_discovery.config import load_run_config
from bias_discovery.data.loaders import load_pairs
from bias_discovery.library import load_seed_library
from bias_discovery.preflight import Assumptions, estimate_run

from helpers import REPO, SHARED_DATA


def estimates(name: str, *overrides: str):  # type: ignore[no-untyped-def]
    config = load_run_config(REPO / "experiments" / name, [f"data.data_dir={SHARED_DATA}", *overrides])
    d = config.data
    bad: list[str] = []
    target = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed, bad_rows=bad)
    test = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed, bad_rows=bad)
    return config, target, test, estimate_run(config, target, test, load_seed_library(config.seed_library))


@pytest.mark.skipif(not (SHARED_DATA / "judgebench").is_dir(), reason="needs the JudgeBench and RewardBench copies")
def test_the_1gpu_configs_validation_bound_is_within_10x_of_its_expected_figure() -> None:
    """As shipped: biasscope-qwen-1gpu.yaml sets validate.max_candidates (20)."""
    config, target, test, rows = estimates(
        "biasscope-qwen-1gpu.yaml", "teacher.price.input_per_mtok=3", "teacher.price.output_per_mtok=15"
    )
    assert config.validate_.max_candidates == 20
    by_stage = {(r.stage, r.role): r for r in rows}
    for row in rows:  # an expected figure never passes its bound
        assert 0 < row.calls <= row.calls_bound
        assert row.prompt_tokens <= row.prompt_tokens_bound and row.completion_tokens <= row.completion_tokens_bound
    validate = by_stage[("validate (judge)", "target")]
    assert validate.calls_bound == 20 * len(test) * config.max_iterations  # bounded by max_candidates and the test set
    assert validate.calls_bound <= 10 * validate.calls
    a = Assumptions()
    assert validate.calls == pytest.approx(
        a.candidates_per_iteration * a.sequential_share * len(test) * config.max_iterations
    )
    perturb = by_stage[("perturb", "teacher")]
    assert perturb.calls == perturb.calls_bound == len(target) * config.max_iterations  # exact: one per target pair
    assert perturb.usd is not None and perturb.usd == pytest.approx(
        (perturb.prompt_tokens * 3 + perturb.completion_tokens * 15) / 1e6
    )
    assert by_stage[("evaluate", "target")].usd is None  # the target has no price


@pytest.mark.skipif(not (SHARED_DATA / "judgebench").is_dir(), reason="needs the JudgeBench and RewardBench copies")
def test_without_max_candidates_the_bound_is_one_candidate_per_target_pair() -> None:
    """The paper's setting validates every candidate."""
    config, target, test, rows = estimates("biasscope-qwen.yaml")
    assert config.validate_.max_candidates is None
    validate = next(r for r in rows if r.stage == "validate (judge)")
    assert validate.calls_bound == len(target) * len(test) * config.max_iterations


def test_check_prints_expected_figures_dollars_and_wall_time_from_a_throughput_probe(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    from kill_anywhere import stub_config

    from stub_openai import launch

    with launch(0.0) as (url, _):
        config = stub_config(tmp_path / "config.yaml", url, pipeline="streamed", n_target=8, n_test=20, priced=True)
        result = subprocess.run(
            [sys.executable, "-m", "bias_discovery.cli", "check", str(config)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "COLUMNS": "200"},
            timeout=300,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "throughput: " in out and "completion tokens/s (8 requests of up to 32 tokens at once" in out
    assert "│ perturb (teacher) │ 8 │" in out and "│ ≤ 8 │" in out  # exact: one rewrite per target pair
    assert "│ all (teacher) │" in out and "$" in out  # dollars per role at kill_anywhere.PRICE
    assert "wall time, target: about" in out and "wall time, teacher: about" in out
    assert "assumed (not measured)" in out
