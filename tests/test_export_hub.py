"""The export guide's one-step upload: a Pro and a DPO export, built by the export code, load with
`datasets.load_dataset` from the local folder offline (the split the card's `configs` names,
which is what the Hub serves after `hf upload`), and the guide's `hf upload` command uses the
options the installed Hub CLI takes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_export import FILTER, fake_engines, make_bias, make_fake_run, write_pairs

from bias_discovery.export.dpo import export_dpo
from bias_discovery.export.pro import export_judgebench_pro

from helpers import REPO


def card_split(folder: Path) -> str:
    front = (folder / "README.md").read_text().split("---")[1]
    [config] = yaml.safe_load(front)["configs"]
    [files] = config["data_files"]
    assert files["path"] == "data.parquet" and (folder / "data.parquet").is_file()
    return str(files["split"])


def test_pro_and_dpo_exports_load_offline_as_the_hub_serves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    pro = tmp_path / "pro"
    stats = export_judgebench_pro(run, pro, variants=2, filter_model=FILTER, engines=fake_engines())
    dpo = tmp_path / "dpo"
    export_dpo(run, dpo, data=str(write_pairs(tmp_path / "prefs.jsonl", 6)), engines=fake_engines())
    for folder, split, rows in ((pro, "test", stats.counts.kept_by_filter), (dpo, "train", None)):
        assert card_split(folder) == split
        ds = datasets.load_dataset(str(folder), split=split, cache_dir=str(tmp_path / "hf-cache"))
        assert len(ds) > 0 and (rows is None or len(ds) == rows)


def test_the_guides_upload_command_uses_the_hub_clis_own_options() -> None:
    guide = (REPO / "docs/guides/export.md").read_text()
    commands = re.findall(r"^hf upload (\S+) (exports/\S+) \. (.*)$", guide, re.M)
    assert [c[1] for c in commands] == ["exports/pro", "exports/dpo"]
    hf = shutil.which("hf") or str(Path(__import__("sys").executable).parent / "hf")
    if not Path(hf).exists():
        pytest.skip("the Hub CLI (huggingface_hub's `hf`) is not installed")
    help_text = subprocess.run([hf, "upload", "--help"], capture_output=True, text=True, timeout=60).stdout
    for _, _, options in commands:
        for option in re.findall(r"--[a-z-]+", options):
            assert option in help_text, option
