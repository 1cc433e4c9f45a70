"""Generic files, field maps, data-dir resolution, the hub path and every kind of bad input."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bias_discovery.data import DATA_DIR_ENV, KNOWN_DATASETS, FieldMap, describe_source, load_pairs
from bias_discovery.data.loaders import JUDGEBENCH_FILES, REWARDBENCH_FILE
from bias_discovery.errors import DataError


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def row(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"p{i}", "question": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", **extra}


def jb_row(i: int, label: str = "A>B", source: str = "livebench-math") -> dict[str, Any]:
    return {
        "pair_id": f"jb-{i}",
        "original_id": i,
        "source": source,
        "question": f"question {i}",
        "response_model": "m",
        "response_A": f"A{i}",
        "response_B": f"B{i}",
        "label": label,
    }


# ----------------------------------------------------------------------------- generic files


def test_jsonl_chosen_rejected(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [row(1, domain="math", source="s", chosen_model="x"), row(2)])
    first, second = load_pairs(path)
    assert (first.id, first.question, first.chosen, first.rejected) == ("p1", "q1", "good 1", "bad 1")
    assert (first.domain, first.source, first.meta) == ("math", "s", {"chosen_model": "x"})
    assert (second.domain, second.source) == ("unknown", "mine")  # defaults: unknown, file stem


def test_path_given_as_string(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [row(1)])
    assert load_pairs(str(path))[0].id == "p1"


def test_prompt_is_accepted_for_question(tmp_path: Path) -> None:
    record = row(1)
    record["prompt"] = record.pop("question")
    pair = load_pairs(write_jsonl(tmp_path / "d.jsonl", [record]))[0]
    assert pair.question == "q1"
    assert "prompt" not in pair.meta


def test_missing_id_uses_stem_and_line(tmp_path: Path) -> None:
    records = [row(1), row(2), row(3)]
    del records[0]["id"], records[2]["id"]
    path = tmp_path / "noids.jsonl"
    path.write_text(json.dumps(records[0]) + "\n\n" + json.dumps(records[1]) + "\n" + json.dumps(records[2]) + "\n")
    assert [p.id for p in load_pairs(path)] == ["noids-1", "p2", "noids-4"]


def test_integer_ids_become_strings(tmp_path: Path) -> None:
    pair = load_pairs(write_jsonl(tmp_path / "d.jsonl", [row(1, id=7)]))[0]
    assert pair.id == "7"


def test_field_map_renames(tmp_path: Path) -> None:
    record = {"uid": 1, "instruction": "q", "good": "g", "bad": "b", "category": "code", "origin": "o", "x": 1}
    fields = FieldMap(
        id="uid", question="instruction", chosen="good", rejected="bad", domain="category", source="origin"
    )
    pair = load_pairs(write_jsonl(tmp_path / "d.jsonl", [record]), field_map=fields)[0]
    assert (pair.id, pair.question, pair.chosen, pair.rejected, pair.domain, pair.source) == (
        "1",
        "q",
        "g",
        "b",
        "code",
        "o",
    )
    assert pair.meta == {"x": 1}


def test_field_map_parse() -> None:
    fields = FieldMap.parse("question=instruction, chosen=good,rejected=bad")
    assert (fields.question, fields.chosen, fields.rejected, fields.id) == ("instruction", "good", "bad", "id")
    with pytest.raises(DataError, match="field map key 'answer' is unknown"):
        FieldMap.parse("answer=x")
    with pytest.raises(DataError, match="not of the form key=field"):
        FieldMap.parse("question")


def test_explicit_question_field_has_no_prompt_fallback(tmp_path: Path) -> None:
    record = {"id": "a", "prompt": "q", "chosen": "g", "rejected": "b"}
    with pytest.raises(DataError, match=r"d\.jsonl:1: missing field 'question'"):
        load_pairs(write_jsonl(tmp_path / "d.jsonl", [record]), field_map=FieldMap(question="question"))


def test_label_style_file_judgebench_shaped(tmp_path: Path) -> None:
    """A JudgeBench-shaped file given by path is read label-style, domain inferred from source."""
    path = write_jsonl(tmp_path / "jb.jsonl", [jb_row(1, "A>B"), jb_row(2, "B>A", "mmlu-pro-law")])
    fields = FieldMap(id="pair_id")
    first, second = load_pairs(path, field_map=fields)
    assert (first.id, first.chosen, first.rejected, first.domain) == ("jb-1", "A1", "B1", "math")
    assert (second.chosen, second.rejected, second.domain, second.source) == ("B2", "A2", "knowledge", "mmlu-pro-law")
    assert second.meta["label"] == "B>A"
    # The file's own A/B order is kept, for `positions: fixed`.
    assert (first.data_order, second.data_order) == ("chosen_first", "rejected_first")


def test_label_style_custom_values(tmp_path: Path) -> None:
    record = {"id": "x", "question": "q", "a": "first", "b": "second", "winner": "model_b"}
    fields = FieldMap(
        style="label", response_a="a", response_b="b", label="winner", label_values={"model_a": "A", "model_b": "B"}
    )
    pair = load_pairs(write_jsonl(tmp_path / "d.jsonl", [record]), field_map=fields)[0]
    assert (pair.chosen, pair.rejected) == ("second", "first")
    assert pair.data_order == "rejected_first"  # whatever the label values are called


def test_chosen_rejected_files_have_no_order_of_their_own(tmp_path: Path) -> None:
    pair = load_pairs(write_jsonl(tmp_path / "d.jsonl", [row(1)]))[0]
    assert pair.data_order is None


def test_json_list_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.json"
    records = [row(1), row(2)]
    del records[1]["id"]
    path.write_text(json.dumps(records, indent=2))
    assert [p.id for p in load_pairs(path)] == ["p1", "pairs-1"]


def test_parquet_file(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist([row(1, domain="math"), row(2, domain="code")]), path)
    pairs = load_pairs(path)
    assert [(p.id, p.domain) for p in pairs] == [("p1", "math"), ("p2", "code")]


def test_limit_and_seed_on_a_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row(i) for i in range(50)])
    assert [p.id for p in load_pairs(path, limit=3)] == ["p0", "p1", "p2"]
    sample = load_pairs(path, limit=5, seed=123)
    assert sample == load_pairs(path, limit=5, seed=123)
    ids = [int(p.id[1:]) for p in sample]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert load_pairs(path, seed=3) == load_pairs(path)  # a seed alone changes nothing


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_bad_limit(tmp_path: Path, bad: Any) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row(1)])
    with pytest.raises(DataError, match="limit must be a positive integer"):
        load_pairs(path, limit=bad)


# ----------------------------------------------------------------------------- bad input


def test_malformed_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(row(1)) + "\n" + '{"id": "p2", "question": \n')
    with pytest.raises(DataError, match=rf"{path}:2: malformed JSON"):
        load_pairs(path)


def test_an_unterminated_string_is_located_once(tmp_path: Path) -> None:
    """json's message ends in "at" ("Unterminated string starting at"): not "at at column"."""
    path = tmp_path / "cut.jsonl"
    path.write_text('{"id": "p1", "question": "Why')
    with pytest.raises(DataError) as info:
        load_pairs(path)
    assert str(info.value).startswith(f"{path}:1: malformed JSON (Unterminated string starting at column 26); ")
    assert "at at" not in str(info.value)


def test_malformed_json_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"id": 1,\n')
    with pytest.raises(DataError, match=rf"{path}:\d+: malformed JSON"):
        load_pairs(path)


def test_json_file_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text(json.dumps(row(1)))
    with pytest.raises(DataError, match="expected a JSON list of objects"):
        load_pairs(path)


@pytest.mark.parametrize("field", ["question", "chosen", "rejected"])
def test_missing_field_names_field_and_line(tmp_path: Path, field: str) -> None:
    records = [row(1), row(2)]
    del records[1][field]
    path = write_jsonl(tmp_path / "d.jsonl", records)
    with pytest.raises(DataError, match=rf"{path}:2: missing field '{field}'"):
        load_pairs(path)


def test_non_string_text_field_names_the_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row(1, chosen=["a", "b"])])
    with pytest.raises(
        DataError, match=rf"{path}:1: field 'chosen' must be a string or a list of chat messages, got list"
    ):
        load_pairs(path)


def test_bad_id_type(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row(1, id={"a": 1})])
    with pytest.raises(DataError, match=r"field 'id' \(the id\) must be a string or an integer"):
        load_pairs(path)


def test_duplicate_ids_name_both_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row(1), row(2), row(1)])
    with pytest.raises(DataError, match=rf"duplicate pair id 'p1': {path}:1 and {path}:3"):
        load_pairs(path)


def test_generic_bad_label_names_the_value(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "jb.jsonl", [jb_row(1), jb_row(2, label="A=B")])
    with pytest.raises(DataError, match=rf"{path}:2: field 'label' has value 'A=B'; expected one of 'A>B', 'B>A'"):
        load_pairs(path, field_map=FieldMap(id="pair_id"))


def test_neither_style_present(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "x", "question": "q", "answer": "a"}])
    with pytest.raises(DataError, match=rf"{path}:1: missing field 'chosen' \(or, for a labelled file, 'label'"):
        load_pairs(path)


def test_parquet_missing_column_names_field_and_row(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "norej.parquet"
    records = [row(1), row(2)]
    for r in records:
        del r["rejected"]
    pq.write_table(pa.Table.from_pylist(records), path)
    with pytest.raises(DataError, match=rf"{path} row 0: missing field 'rejected'"):
        load_pairs(path)


def test_parquet_null_value_is_missing(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.Table.from_pylist([row(1), row(2, chosen=None)]), path)
    with pytest.raises(DataError, match=rf"{path} row 1: missing field 'chosen'"):
        load_pairs(path)


def test_not_parquet(tmp_path: Path) -> None:
    path = tmp_path / "fake.parquet"
    path.write_text("not parquet")
    with pytest.raises(DataError, match=rf"{path}: cannot read parquet"):
        load_pairs(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        load_pairs(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="file not found"):
        load_pairs(tmp_path / "nope.parquet")


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("id,question\n")
    with pytest.raises(DataError, match=r"unsupported file type '\.csv'; expected one of \.jsonl, \.json, \.parquet"):
        load_pairs(path)


def test_unknown_set_name_lists_known_names() -> None:
    with pytest.raises(DataError) as info:
        load_pairs("judgebnch")
    message = str(info.value)
    assert "unknown data set 'judgebnch'" in message
    for name in KNOWN_DATASETS:
        assert name in message


def test_unknown_judgebench_split() -> None:
    with pytest.raises(DataError, match=r"unknown JudgeBench split 'llama'.*judgebench:gpt, judgebench:claude"):
        load_pairs("judgebench:llama")


def test_data_dir_without_the_file_names_the_expected_path(tmp_path: Path) -> None:
    expected = tmp_path / JUDGEBENCH_FILES["gpt"]
    with pytest.raises(DataError, match="expected the file") as info:
        load_pairs("judgebench", data_dir=tmp_path)
    assert str(expected) in str(info.value)
    with pytest.raises(DataError) as info:
        load_pairs("rewardbench", data_dir=tmp_path)
    assert str(tmp_path / REWARDBENCH_FILE) in str(info.value)


def test_data_dir_that_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match="is not a directory"):
        load_pairs("judgebench", data_dir=tmp_path / "missing")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(DataError, match=rf"{DATA_DIR_ENV}=.*is not a directory"):
        load_pairs("judgebench")


def _local_judgebench(tmp_path: Path, gpt: list[dict], claude: list[dict]) -> Path:
    (tmp_path / "judgebench").mkdir()
    write_jsonl(tmp_path / JUDGEBENCH_FILES["gpt"], gpt)
    write_jsonl(tmp_path / JUDGEBENCH_FILES["claude"], claude)
    return tmp_path


def test_judgebench_bad_label_names_file_line_and_value(tmp_path: Path) -> None:
    data_dir = _local_judgebench(tmp_path, [jb_row(1), jb_row(2), jb_row(3, label="A>>B")], [])
    with pytest.raises(DataError) as info:
        load_pairs("judgebench:gpt", data_dir=data_dir)
    message = str(info.value)
    assert f"{tmp_path / JUDGEBENCH_FILES['gpt']}:3" in message
    assert "'A>>B'" in message


def test_judgebench_missing_field(tmp_path: Path) -> None:
    broken = jb_row(2)
    del broken["response_B"]
    data_dir = _local_judgebench(tmp_path, [jb_row(1), broken], [])
    with pytest.raises(DataError, match=r"gpt-4o-2024-05-13\.jsonl:2: missing field 'response_B'"):
        load_pairs("judgebench", data_dir=data_dir)


def test_judgebench_duplicate_in_a_split(tmp_path: Path) -> None:
    data_dir = _local_judgebench(tmp_path, [], [jb_row(1), jb_row(1)])
    with pytest.raises(DataError, match=r"duplicate pair id 'jb-1': .*claude.*\.jsonl:1 and .*\.jsonl:2"):
        load_pairs("judgebench", data_dir=data_dir)


def test_judgebench_cross_split_collision_is_prefixed(tmp_path: Path) -> None:
    data_dir = _local_judgebench(tmp_path, [jb_row(1), jb_row(2)], [jb_row(2), jb_row(3)])
    pairs = load_pairs("judgebench", data_dir=data_dir)
    assert [p.id for p in pairs] == ["jb-1", "jb-2", "claude:jb-2", "jb-3"]
    assert pairs[2].meta["pair_id"] == "jb-2"
    # one split alone keeps its ids untouched
    assert [p.id for p in load_pairs("judgebench:claude", data_dir=data_dir)] == ["jb-2", "jb-3"]


def test_judgebench_unknown_source_keeps_source(tmp_path: Path) -> None:
    data_dir = _local_judgebench(tmp_path, [jb_row(1, source="newbench-physics")], [])
    pair = load_pairs("judgebench:gpt", data_dir=data_dir)[0]
    assert (pair.domain, pair.source) == ("unknown", "newbench-physics")


# ----------------------------------------------------------------------------- hub path


class FakeDatasets:
    """Stands in for the `datasets` module: records calls, returns lists of dicts."""

    def __init__(self, tables: dict[tuple[str, str], list[dict]] | None = None, error: Exception | None = None):
        self.tables = tables or {}
        self.error = error
        self.calls: list[tuple[str, str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        module = types.ModuleType("datasets")
        module.load_dataset = self.load_dataset  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "datasets", module)

    def load_dataset(self, repo: str, *args: Any, split: str | None = None, **kwargs: Any) -> list[dict]:
        assert not args and not kwargs, (args, kwargs)
        assert split is not None
        self.calls.append((repo, split))
        if self.error is not None:
            raise self.error
        return self.tables[(repo, split)]


def test_hub_judgebench_both_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDatasets(
        {
            ("ScalerLab/JudgeBench", "gpt"): [jb_row(1), jb_row(2, "B>A")],
            ("ScalerLab/JudgeBench", "claude"): [jb_row(3, source="livecodebench")],
        }
    )
    fake.install(monkeypatch)
    pairs = load_pairs("judgebench")
    assert fake.calls == [("ScalerLab/JudgeBench", "gpt"), ("ScalerLab/JudgeBench", "claude")]
    assert [(p.id, p.chosen, p.domain, p.meta["split"]) for p in pairs] == [
        ("jb-1", "A1", "math", "gpt"),
        ("jb-2", "B2", "math", "gpt"),
        ("jb-3", "A3", "code", "claude"),
    ]
    assert describe_source("judgebench") == "judgebench (hub: ScalerLab/JudgeBench, splits gpt+claude)"


def test_hub_judgebench_one_split(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDatasets({("ScalerLab/JudgeBench", "claude"): [jb_row(1)]})
    fake.install(monkeypatch)
    assert len(load_pairs("judgebench:claude")) == 1
    assert fake.calls == [("ScalerLab/JudgeBench", "claude")]


def test_hub_bad_label_names_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeDatasets({("ScalerLab/JudgeBench", "gpt"): [jb_row(1), jb_row(2, label="tie")]}).install(monkeypatch)
    with pytest.raises(DataError, match=r"hub ScalerLab/JudgeBench\[gpt\] row 1: field 'label' has value 'tie'"):
        load_pairs("judgebench:gpt")


def test_hub_rewardbench_section_from_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    hub_rows = [  # the hub's filtered split has no `section` column
        {
            "id": 30,
            "prompt": "p",
            "chosen": "c",
            "chosen_model": "m1",
            "rejected": "r",
            "rejected_model": "m2",
            "subset": "alpacaeval-easy",
        },
        {
            "id": 31,
            "prompt": "p",
            "chosen": "c",
            "chosen_model": "m1",
            "rejected": "r",
            "rejected_model": "m2",
            "subset": "math-prm",
        },
    ]
    fake = FakeDatasets({("allenai/reward-bench", "filtered"): hub_rows})
    fake.install(monkeypatch)
    pairs = load_pairs("rewardbench")
    assert fake.calls == [("allenai/reward-bench", "filtered")]
    assert [(p.id, p.domain, p.source) for p in pairs] == [
        ("30", "Chat", "alpacaeval-easy"),
        ("31", "Reasoning", "math-prm"),
    ]
    assert [p.id for p in load_pairs("rewardbench:reasoning")] == ["31"]
    assert describe_source("rewardbench") == "rewardbench (hub: allenai/reward-bench, split filtered)"


def test_hub_generic_data_set(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDatasets({("someone/prefs", "test"): [row(1), {k: v for k, v in row(2).items() if k != "id"}]})
    fake.install(monkeypatch)
    pairs = load_pairs("hf:someone/prefs:test")
    assert fake.calls == [("someone/prefs", "test")]
    assert [p.id for p in pairs] == ["p1", "prefs-test-1"]
    assert pairs[0].source == "someone/prefs"


def test_hub_failure_is_a_data_error(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeDatasets(
        error=ConnectionError("Couldn't reach 'ScalerLab/JudgeBench' on the Hub (LocalEntryNotFoundError)")
    ).install(monkeypatch)
    with pytest.raises(DataError) as info:
        load_pairs("judgebench")
    message = str(info.value)
    assert "could not reach the hub to load ScalerLab/JudgeBench (split gpt)" in message
    assert "`data_dir`" in message and DATA_DIR_ENV in message
    assert info.value.__cause__ is None  # a user error: no chained traceback


def test_hub_without_datasets_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataError, match=r"needs the `datasets` package.*`data_dir`"):
        load_pairs("rewardbench")


def test_real_datasets_offline_fails_cleanly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real `datasets` library in offline mode: the error is ours, with the hint."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: nothing to fall back on
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    with pytest.raises(DataError, match=r"could not reach the hub to load ScalerLab/JudgeBench.*`data_dir`"):
        load_pairs("judgebench:gpt")


def test_importing_loaders_stays_light() -> None:
    import subprocess

    code = (
        "import sys, bias_discovery.data as d; "
        "heavy = [m for m in ('datasets', 'torch', 'pyarrow') if m in sys.modules]; "
        "print(heavy); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_describe_source_demo_file_and_hf(tmp_path: Path) -> None:
    assert describe_source("demo").startswith("demo (packaged: ") and describe_source("demo").endswith(
        "demo_pairs.jsonl)"
    )
    path = write_jsonl(tmp_path / "d.jsonl", [row(1)])
    assert describe_source(path) == f"file: {path.resolve()}"
    assert describe_source("hf:someone/prefs") == "hf:someone/prefs:train (hub: someone/prefs, split train)"
    with pytest.raises(DataError, match="unknown data set"):
        describe_source("nope")
