"""The judge's position preference, measured on every run (`validate.position_profile`): the
statistic (metrics.position_profile) by hand, and in the loop: the other order of each test pair
judged once, written to baseline/positions.json, paid once, and none with `positions: both`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_loop import make_config, run_fake

from bias_discovery.metrics import position_profile


def test_the_profile_counts_pairs_decided_by_position_with_wilson_and_the_sign_test() -> None:
    # pairs: first in both orders x3, second in both x1, consistent x1, invalid x1
    y_cr = ["chosen", "chosen", "chosen", "rejected", "chosen", None]
    y_rc = ["rejected", "rejected", "rejected", "chosen", "chosen", "rejected"]
    profile = position_profile(y_cr, y_rc, extra_calls=6)
    assert (profile.n_pairs, profile.first_both, profile.second_both, profile.n_excluded) == (5, 3, 1, 1)
    assert profile.decided_by_position.value == pytest.approx(4 / 5)
    # Wilson 95 % for 4/5 (z = 1.959964): (0.3755, 0.9638)
    assert profile.decided_by_position.ci_low == pytest.approx(0.3755, abs=1e-3)
    assert profile.decided_by_position.ci_high == pytest.approx(0.9638, abs=1e-3)
    assert profile.first_share.value == pytest.approx(3 / 4)
    assert profile.sign_test_p == pytest.approx(0.625)  # exact two-sided: P(X<=1 or X>=3 | n=4, 1/2) = 10/16
    assert profile.first_rate == pytest.approx(8 / 11)  # 11 valid verdicts; the first shown won 4 + 4 times
    assert profile.extra_calls == 6
    assert "for 3 of 5 test pairs" in profile.sentence() and "95 % CI 38-96 %" in profile.sentence()


def test_a_judge_that_always_says_a_is_decided_by_position_on_every_pair() -> None:
    profile = position_profile(["chosen"] * 20, ["rejected"] * 20)
    assert profile.decided_by_position.value == 1.0 and profile.decided_by_position.n == 20
    assert profile.decided_by_position.ci_low == pytest.approx(0.8389, abs=1e-3)  # Wilson, 20/20
    assert profile.sign_test_p == pytest.approx(2 / 2**20)


@pytest.mark.parametrize("positions", ["swap", "both"])
def test_the_loop_measures_it_once_per_run(tmp_path: Path, positions: str) -> None:
    config = make_config(tmp_path, max_iterations=1, judge={"positions": positions})
    rd, _, engine = run_fake(tmp_path, config)
    profile = json.loads((rd.root / "baseline" / "positions.json").read_text())
    assert profile["n_pairs"] + profile["n_excluded"] == 24
    assert profile["extra_calls"] == (24 if positions == "swap" else 0)
    assert (rd.root / "baseline" / "mirror.json").exists() == (positions == "swap")
    if positions == "swap":
        mirror = json.loads((rd.root / "baseline" / "mirror.json").read_text())
        baseline = json.loads((rd.root / "baseline" / "result.json").read_text())
        shown = {(j["pair_id"], j["order"]) for j in baseline["judgments"]}
        assert all((j["pair_id"], j["order"]) not in shown for j in mirror["judgments"])  # the other order each time
        events = [json.loads(line) for line in (rd.root / "events.jsonl").read_text().splitlines()]
        assert any(e.get("stage") == "positions" and e["event"] == "stage_end" for e in events)


def test_it_is_off_with_a_mitigation_and_when_switched_off(tmp_path: Path) -> None:
    for name, overrides in (
        ("mitigated", {"judge": {"mitigation": "swap"}}),
        ("off", {"validate": {"n_boot": 200, "position_profile": False}}),
    ):
        (tmp_path / name).mkdir()
        config = make_config(tmp_path / name, max_iterations=1, **overrides)
        rd, _, _ = run_fake(tmp_path / name, config)
        assert not (rd.root / "baseline" / "positions.json").exists()
