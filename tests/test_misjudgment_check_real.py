"""The misjudgment check on the real embedded model: the quick start's run (`small_real_run`)
records an answer check for every misjudged target pair, and only the pairs that count go on to
DeeperExplain and IdentifyBias. The scripted tests are in test_misjudgment_check.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.report.summary import run_summary
from bias_discovery.run import MisjudgmentStats, RunDir

pytestmark = pytest.mark.model


def test_every_misjudged_pair_of_a_real_run_has_its_answer_check(small_real_run: Path):
    record = RunDir(small_real_run).iteration(1)
    misjudged = record.misjudged.read()
    assert misjudged, "the quick start's judge got no perturbed target pair wrong: nothing was checked"
    for case in misjudged:
        assert case.answer_check in ("same", "different", "unusable"), case.pair_id
        assert case.check_method in ("extracted", "model") and case.length_ratio is not None, case.pair_id
        if case.answer_check == "same" and case.original_check == "different":
            assert case.excluded == "answer_changed", case.pair_id
    counted = {c.pair_id for c in misjudged if c.excluded is None}
    assert {c.pair_id for c in record.explanations.read()} == counted
    assert {r.pair_id for r in record.identified.read()} == counted
    stats = record.misjudgments.read()
    assert stats == MisjudgmentStats.of(misjudged, checked=True)
    summary = run_summary(small_real_run)
    assert summary.misjudged is not None and summary.misjudged.startswith(
        f"Misjudged: {len(misjudged)} perturbed target pair"
    )
    assert (
        f"of those, {stats.answer_changed} " in summary.misjudged and f"; {stats.counted} counted" in summary.misjudged
    )
