"""The options models of the exports and of `discover` (settings/export.py,
settings/discover.py), and the exports' typed results: an unknown option or one out of bounds
is refused by name before anything is written, keyword arguments override an options object's
fields, and the Pro and DPO exports return stats.json as `ProStats` / `DpoStats`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_export import FILTER, fake_engines, make_bias, make_fake_run, write_pairs

from bias_discovery.api import (
    DiscoverOptions,
    DpoExportOptions,
    DpoStats,
    HarnessExport,
    HarnessExportOptions,
    ProExportOptions,
    ProStats,
    discover,
    export_dpo,
    export_harness,
    export_judgebench_pro,
)
from bias_discovery.errors import ConfigError, ExportError
from bias_discovery.options import CallOptions, DataOptions, OutputOptions

from helpers import cli


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])


@pytest.mark.parametrize("model", [ProExportOptions, DpoExportOptions, HarnessExportOptions, DiscoverOptions])
def test_an_unknown_option_is_refused_naming_it(model):
    with pytest.raises(ValidationError, match="varients"):
        model.model_validate({"varients": 2})


def test_the_export_options_inherit_the_shared_fields_instead_of_retyping_them():
    for model, bases in (
        (ProExportOptions, (DataOptions, OutputOptions, CallOptions)),
        (DpoExportOptions, (DataOptions, OutputOptions, CallOptions)),
        (HarnessExportOptions, (OutputOptions,)),
        (DiscoverOptions, (CallOptions,)),
    ):
        for base in bases:
            assert issubclass(model, base)
            for name in base.model_fields:
                assert name not in model.__dict__.get("__annotations__", {}), f"{model.__name__}.{name} retyped"
        # every field has a docstring: the command line's help reads it
        assert all(field.description for field in model.model_fields.values()), model.__name__


@pytest.mark.parametrize(("field", "value"), [("variants", 0), ("limit", 0), ("timeout_s", 0.0), ("variants", "many")])
def test_a_pro_option_out_of_bounds_is_refused_by_name_and_nothing_is_written(run: Path, tmp_path: Path, field, value):
    out = tmp_path / "pro"
    with pytest.raises(ValidationError) as info:
        export_judgebench_pro(run, out, filter_model=FILTER, engines=fake_engines(), **{field: value})
    assert [error["loc"][0] for error in info.value.errors()] == [field]
    assert not out.exists()


def test_keywords_override_the_options_object_and_the_positional_out_its_out(run: Path, tmp_path: Path):
    options = ProExportOptions(out=tmp_path / "unused", variants=1, filter_model=FILTER)
    stats = export_judgebench_pro(run, tmp_path / "pro", options, variants=2, engines=fake_engines())
    assert isinstance(stats, ProStats)
    assert stats.counts.variants_per_pair == 2 and stats.models.filter == FILTER  # override, and the object's field
    assert (tmp_path / "pro" / "stats.json").is_file() and not (tmp_path / "unused").exists()
    assert options.variants == 1  # the caller's object is not changed
    # the options object alone, `out` included
    stats = export_judgebench_pro(
        run, options=options.model_copy(update={"out": tmp_path / "b"}), engines=fake_engines()
    )
    assert stats.counts.variants_per_pair == 1 and (tmp_path / "b" / "stats.json").is_file()


def test_an_export_without_out_is_refused(run: Path):
    with pytest.raises(ExportError, match="`out` is required"):
        export_judgebench_pro(run, variants=1, filter_model=FILTER, engines=fake_engines())
    with pytest.raises(ExportError, match="`out` is required"):
        export_dpo(run, data="demo", engines=fake_engines())


def test_the_pro_result_is_stats_json_typed(run: Path, tmp_path: Path):
    out = tmp_path / "pro"
    stats = export_judgebench_pro(run, out, variants=2, filter_model=FILTER, engines=fake_engines())
    written = json.loads((out / "stats.json").read_text())
    assert stats == ProStats.model_validate(written)
    assert stats.model_dump(mode="json") == written  # the dict the export returned before it was typed
    assert stats.counts.kept_by_filter == written["counts"]["kept_by_filter"] and stats.kind == "judgebench-pro"
    assert stats.run_name == written["run_name"] == "fake-run"


def test_the_dpo_result_is_stats_json_typed_and_its_format_is_checked(run: Path, tmp_path: Path):
    data = str(write_pairs(tmp_path / "prefs.jsonl", 4))
    with pytest.raises(ValidationError) as info:
        export_dpo(run, tmp_path / "bad", data=data, fmt="chat", engines=fake_engines())
    assert [error["loc"][0] for error in info.value.errors()] == ["fmt"] and not (tmp_path / "bad").exists()
    with pytest.raises(ExportError, match="`data` is required"):
        export_dpo(run, tmp_path / "none", engines=fake_engines())
    options = DpoExportOptions(data=data, fmt="conversational")
    stats = export_dpo(run, tmp_path / "dpo", options, include_original=True, engines=fake_engines())
    assert isinstance(stats, DpoStats) and stats.format == "conversational" and stats.include_original is True
    written = json.loads((tmp_path / "dpo" / "stats.json").read_text())
    assert stats == DpoStats.model_validate(written) and stats.model_dump(mode="json") == written
    assert stats.counts.pairs == 4 and stats.counts.original_rows == 4


def test_the_harness_export_takes_its_options_and_keyword_overrides(run: Path, tmp_path: Path):
    pro = tmp_path / "pro"
    export_judgebench_pro(run, pro, variants=2, filter_model=FILTER, engines=fake_engines())
    options = HarnessExportOptions(out=tmp_path / "inspect", task_name="from_options")
    info = export_harness("inspect", pro, options=options, task_name="overridden")
    assert isinstance(info, HarnessExport) and info.task == "overridden" and info.samples > 0
    written = json.loads((tmp_path / "inspect" / "export.json").read_text())
    assert info.model_dump(mode="json", exclude_unset=True) == written  # export.json, typed
    with pytest.raises(ValidationError, match="task_nam"):
        export_harness("inspect", pro, tmp_path / "other", task_nam="x")
    assert not (tmp_path / "other").exists()


def test_discover_takes_its_options_and_refuses_an_unknown_one(tmp_path: Path):
    with pytest.raises(ValidationError, match="run_directory"):
        discover({"name": "x"}, run_directory=tmp_path / "run")
    with pytest.raises(ValidationError) as info:
        discover({"name": "x"}, DiscoverOptions(run_dir=tmp_path / "run"), timeout_s=0)
    assert [error["loc"][0] for error in info.value.errors()] == ["timeout_s"]
    with pytest.raises(ConfigError, match="resume needs run_dir"):
        discover(options=DiscoverOptions(resume=True))
    assert not (tmp_path / "run").exists()


def test_the_dpo_command_refuses_a_format_naming_its_flag_and_writes_nothing(run: Path, tmp_path: Path):
    out = tmp_path / "dpo"
    data = str(write_pairs(tmp_path / "prefs.jsonl", 2))
    result = cli("export", "dpo", str(run), "--data", data, "--out", str(out), "--format", "chat", check=False)
    assert result.returncode == 2 and "--format:" in result.stderr and "conversational" in result.stderr
    assert not out.exists()
    # a bound of the model is the flag's bound
    result = cli("export", "judgebench-pro", str(run), "--out", str(out), "--variants", "0", check=False)
    assert result.returncode == 2 and "--variants" in result.stderr and not out.exists()
