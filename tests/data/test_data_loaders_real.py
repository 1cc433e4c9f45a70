"""Loaders on the project's real copy of JudgeBench and RewardBench (skipped where absent)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bias_discovery.data import DATA_DIR_ENV, describe_source, load_pairs
from bias_discovery.data.loaders import JUDGEBENCH_FILES, REWARDBENCH_FILE, bad_rows_for, skipped_rows_message
from bias_discovery.errors import DataError

IDENTICAL_CLAUDE_LINE = 265
"""JudgeBench's claude split holds one pair whose two responses are the same text."""


def _raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def jb(name: str, data_dir: Path | None, **kwargs) -> list:
    """A JudgeBench set loaded with `--skip-bad-rows`: its one pair of identical responses skipped."""
    return load_pairs(name, data_dir=data_dir, bad_rows=[], **kwargs)


@pytest.mark.parametrize(
    ("name", "count", "skipped"),
    [("judgebench:gpt", 350, 0), ("judgebench:claude", 269, 1), ("judgebench", 619, 1), ("rewardbench", 2985, 0)],
)
def test_counts(shared_data: Path, name: str, count: int, skipped: int) -> None:
    bad_rows: list[str] = []
    pairs = load_pairs(name, data_dir=shared_data, bad_rows=bad_rows)
    assert len(pairs) == count and len(bad_rows) == skipped
    assert len({p.id for p in pairs}) == count


def test_names_are_case_insensitive(shared_data: Path) -> None:
    assert len(load_pairs("JudgeBench:GPT", data_dir=shared_data)) == 350


def test_judgebench_both_splits_gpt_then_claude(shared_data: Path) -> None:
    both = jb("judgebench", shared_data)
    gpt = load_pairs("judgebench:gpt", data_dir=shared_data)
    claude = jb("judgebench:claude", shared_data)
    assert both == gpt + claude  # no id collides across splits today, so no prefix either
    assert {p.meta["split"] for p in both[:350]} == {"gpt"}
    assert {p.meta["split"] for p in both[350:]} == {"claude"}


def test_judgebench_known_rows(shared_data: Path) -> None:
    by_id = {p.id: p for p in load_pairs("judgebench:gpt", data_dir=shared_data)}
    a_wins = by_id["e302b0a0-28d5-5a3c-b1af-fedcf5543e72"]  # line 1, label A>B
    assert a_wins.meta == {
        "original_id": 1420,
        "response_model": "gpt-4o-2024-05-13",
        "label": "A>B",
        "split": "gpt",
    }
    b_wins = by_id["05ea6065-69da-58b9-a53b-872e8d940915"]  # line 10, label B>A, mmlu-pro-law
    assert b_wins.meta["label"] == "B>A"
    assert b_wins.chosen.rstrip().endswith("DDDDD")
    assert b_wins.rejected.rstrip().endswith("**FFFFF**")
    assert (b_wins.source, b_wins.domain) == ("mmlu-pro-law", "knowledge")


@pytest.mark.parametrize("split", ["gpt", "claude"])
def test_judgebench_label_mapping_on_every_row(shared_data: Path, split: str) -> None:
    raw = _raw(shared_data / JUDGEBENCH_FILES[split])
    if split == "claude":
        del raw[IDENTICAL_CLAUDE_LINE - 1]
    pairs = jb(f"judgebench:{split}", shared_data)
    assert len(raw) == len(pairs)
    for row, pair in zip(raw, pairs):
        assert pair.id == row["pair_id"]
        assert pair.question == row["question"]
        better, worse = ("response_A", "response_B") if row["label"] == "A>B" else ("response_B", "response_A")
        assert row["label"] in ("A>B", "B>A")
        assert (pair.chosen, pair.rejected) == (row[better], row[worse])
        assert pair.source == row["source"]
        assert pair.meta["original_id"] == row["original_id"]
        assert pair.meta["response_model"] == row["response_model"]
        assert pair.data_order == ("chosen_first" if row["label"] == "A>B" else "rejected_first")


def test_judgebench_domains(shared_data: Path) -> None:
    """JudgeBench's own grouping: every mmlu-pro-* subject, mmlu-pro-math included, is knowledge
    (the paper's 154 knowledge pairs on the gpt split are 14 subjects x 11)."""
    pairs = jb("judgebench", shared_data)  # the skipped pair of identical responses is a code pair
    assert Counter(p.domain for p in pairs) == {"knowledge": 308, "reasoning": 149, "math": 90, "code": 72}
    gpt = load_pairs("judgebench:gpt", data_dir=shared_data)
    assert Counter(p.domain for p in gpt) == {"knowledge": 154, "reasoning": 98, "math": 56, "code": 42}
    mmlu_math = [p for p in pairs if p.source == "mmlu-pro-math"]
    assert len(mmlu_math) == 22 and {p.domain for p in mmlu_math} == {"knowledge"}


def test_judgebench_identical_responses_are_refused_or_skipped_and_counted(shared_data: Path) -> None:
    """A pair whose responses are the same text has no right answer: scoring it would count a
    judge error whatever the judge says. `load_pairs` refuses it, naming the line, unless given
    `bad_rows`; its callers give them for a published set (`bad_rows_for`), so JudgeBench loads
    as published with the row skipped and counted."""
    path = shared_data / JUDGEBENCH_FILES["claude"]
    with pytest.raises(DataError) as info:
        load_pairs("judgebench:claude", data_dir=shared_data)
    assert f"{path}:{IDENTICAL_CLAUDE_LINE}: fields 'response_A' and 'response_B' hold the same text" in str(info.value)
    assert "`skip_bad_rows`" in str(info.value)
    bad_rows: list[str] = []
    claude = load_pairs("judgebench:claude", data_dir=shared_data, bad_rows=bad_rows)
    assert bad_rows == [
        f"{path}:{IDENTICAL_CLAUDE_LINE}: fields 'response_A' and 'response_B' hold the same text: "
        "the pair has no better response to pick"
    ]
    assert "a28a8dae-78a7-51a7-a46f-84a6e502068d" not in {p.id for p in claude}
    assert not any(p.chosen.strip() == p.rejected.strip() for p in claude)
    # a published set skips without being asked; the same rows in a user's own file stop
    assert bad_rows_for("judgebench:claude", False) == [] and bad_rows_for("JudgeBench", False) == []
    assert bad_rows_for("rewardbench:chat", False) == [] and bad_rows_for(str(path), False) is None
    assert bad_rows_for(str(path), True) == [] and bad_rows_for("demo", False) is None
    message = skipped_rows_message(bad_rows, "judgebench:claude")
    assert message.startswith("skipped 1 row of judgebench:claude (the rows of a published benchmark")
    assert "\n" not in message and f":{IDENTICAL_CLAUDE_LINE}: fields" in message
    with pytest.raises(DataError, match=f":{IDENTICAL_CLAUDE_LINE}: fields 'response_A'"):
        load_pairs(path, bad_rows=bad_rows_for(path, False))


def test_rewardbench_mapping(shared_data: Path) -> None:
    raw = _raw(shared_data / REWARDBENCH_FILE)
    pairs = load_pairs("rewardbench", data_dir=shared_data)
    assert Counter(p.domain for p in pairs) == {"Reasoning": 1431, "Safety": 740, "Chat Hard": 456, "Chat": 358}
    for row, pair in zip(raw, pairs):
        assert pair.question == row["prompt"]
        assert (pair.chosen, pair.rejected) == (row["chosen"], row["rejected"])
        assert (pair.domain, pair.source) == (row["section"], row["subset"])
        assert pair.meta["chosen_model"] == row["chosen_model"]
        assert pair.meta["rejected_model"] == row["rejected_model"]
        assert pair.meta["rewardbench_id"] == row["id"]
        assert pair.id in (str(row["id"]), f"{row['id']}-{row['subset']}")
    first = pairs[0]
    assert (first.id, first.source, first.domain) == ("30", "alpacaeval-easy", "Chat")


def test_rewardbench_duplicate_id_is_disambiguated(shared_data: Path) -> None:
    pairs = load_pairs("rewardbench", data_dir=shared_data)
    assert sorted(p.id for p in pairs if p.meta["rewardbench_id"] == 3692) == ["3692-donotanswer", "3692-hep-python"]
    assert "3692" not in {p.id for p in pairs}
    # the id does not depend on a section filter
    reasoning = {p.id for p in load_pairs("rewardbench:reasoning", data_dir=shared_data)}
    assert "3692-hep-python" in reasoning


@pytest.mark.parametrize(
    ("name", "section", "count"),
    [
        ("rewardbench:reasoning", "Reasoning", 1431),
        ("rewardbench:SAFETY", "Safety", 740),
        ("rewardbench:chat-hard", "Chat Hard", 456),
        ("rewardbench:Chat Hard", "Chat Hard", 456),
        ("rewardbench:chat", "Chat", 358),
    ],
)
def test_rewardbench_sections(shared_data: Path, name: str, section: str, count: int) -> None:
    pairs = load_pairs(name, data_dir=shared_data)
    assert len(pairs) == count
    assert {p.domain for p in pairs} == {section}


def test_unknown_rewardbench_section(shared_data: Path) -> None:
    with pytest.raises(DataError, match=r"unknown RewardBench section 'coding'.*reasoning"):
        load_pairs("rewardbench:coding", data_dir=shared_data)


def test_limit_takes_the_first_n_in_file_order(shared_data: Path) -> None:
    full = jb("judgebench", shared_data)
    assert jb("judgebench", shared_data, limit=20) == full[:20]
    assert jb("judgebench", shared_data, limit=10_000) == full


def test_seeded_sample_is_deterministic_and_in_file_order(shared_data: Path) -> None:
    full = jb("judgebench", shared_data)
    position = {p.id: i for i, p in enumerate(full)}
    first = jb("judgebench", shared_data, limit=25, seed=7)
    again = jb("judgebench", shared_data, limit=25, seed=7)
    other = jb("judgebench", shared_data, limit=25, seed=8)
    assert first == again
    assert len(first) == 25 and len({p.id for p in first}) == 25
    assert [p.id for p in first] != [p.id for p in other]
    assert [p.id for p in first] != [p.id for p in full[:25]]
    indices = [position[p.id] for p in first]
    assert indices == sorted(indices)
    # a seeded sample spans both splits, not just the head of the file
    assert {p.meta["split"] for p in jb("judgebench", shared_data, limit=100, seed=1)} == {
        "gpt",
        "claude",
    }


def test_data_dir_from_environment(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(shared_data))
    assert len(jb("judgebench:claude", None)) == 269
    assert describe_source("judgebench:claude") == (
        f"judgebench:claude (local: {shared_data / JUDGEBENCH_FILES['claude']})"
    )


def test_data_dir_argument_wins_over_environment(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))  # empty dir: would fail if used
    assert len(load_pairs("judgebench:gpt", data_dir=shared_data)) == 350
    with pytest.raises(DataError, match="expected the file"):
        load_pairs("judgebench:gpt")


def test_describe_source_local(shared_data: Path) -> None:
    assert describe_source("judgebench", shared_data) == f"judgebench (local: {shared_data / 'judgebench'})"
    assert describe_source("rewardbench:reasoning", shared_data) == (
        f"rewardbench:reasoning (local: {shared_data / REWARDBENCH_FILE})"
    )
