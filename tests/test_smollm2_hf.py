"""The Hugging Face-format SmolLM2 cache (`bias_discovery.smollm2_hf`).

The cache logic (reuse, atomic build, clear errors) is tested with the real packaged GGUF and a
stand-in for the conversion; the real conversion runs where gguf and accelerate are installed
(`./scripts/setup.sh --vllm-cpu`) and is skipped elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bias_discovery import smollm2_hf
from bias_discovery.errors import EngineError

from helpers import REPO


def _target_name(gguf: Path) -> str:
    return f"smollm2-135m-instruct-hf-{smollm2_hf._sha256(gguf)[:12]}"


def _fake_convert(gguf: Path, out_dir: Path) -> list[str]:
    (out_dir / "config.json").write_text("{}")
    (out_dir / "model.safetensors").write_bytes(b"weights")
    return ["config.json", "model.safetensors"]


@pytest.fixture
def no_packages_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smollm2_hf, "_check_build_packages", lambda: None)


def test_builds_once_into_a_hash_named_directory_then_reuses_it(
    tmp_path: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch, no_packages_check: None
) -> None:
    monkeypatch.setattr(smollm2_hf, "_convert", _fake_convert)
    first = smollm2_hf.build_hf_smollm2(tmp_path)
    assert first == tmp_path / _target_name(smollm2_gguf_path)
    marker = json.loads((first / smollm2_hf.MARKER).read_text())
    assert marker["source_sha256"].startswith(first.name.rsplit("-", 1)[1])
    assert marker["files"] == ["config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left behind
    assert oct(first.stat().st_mode & 0o777) != oct(0o700)  # not mkdtemp's private mode

    def must_not_build(gguf: Path, out_dir: Path) -> list[str]:
        raise AssertionError("a complete build was rebuilt")

    monkeypatch.setattr(smollm2_hf, "_convert", must_not_build)
    assert smollm2_hf.build_hf_smollm2(tmp_path) == first


def test_default_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIAS_DISCOVERY_CACHE_DIR", str(tmp_path / "c"))
    assert smollm2_hf.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("BIAS_DISCOVERY_CACHE_DIR")
    assert smollm2_hf.default_cache_dir() == Path.home() / ".cache" / "bias-discovery"


def test_a_failed_build_leaves_nothing_behind(
    tmp_path: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch, no_packages_check: None
) -> None:
    def half_then_fail(gguf: Path, out_dir: Path) -> list[str]:
        (out_dir / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(smollm2_hf, "_convert", half_then_fail)
    with pytest.raises(EngineError, match="disk full"):
        smollm2_hf.build_hf_smollm2(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_another_process_finishing_first_is_not_an_error(
    tmp_path: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch, no_packages_check: None
) -> None:
    target = tmp_path / _target_name(smollm2_gguf_path)

    def race(gguf: Path, out_dir: Path) -> list[str]:
        target.mkdir()  # the other process renames its complete build into place meanwhile
        _fake_convert(gguf, target)
        (target / smollm2_hf.MARKER).write_text(json.dumps({"files": ["config.json"]}))
        return _fake_convert(gguf, out_dir)

    monkeypatch.setattr(smollm2_hf, "_convert", race)
    assert smollm2_hf.build_hf_smollm2(tmp_path) == target
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_an_incomplete_directory_is_reported_not_used(tmp_path: Path, smollm2_gguf_path: Path) -> None:
    target = tmp_path / _target_name(smollm2_gguf_path)
    target.mkdir()
    (target / "config.json").write_text("{}")
    with pytest.raises(EngineError, match="not a complete build"):
        smollm2_hf.build_hf_smollm2(tmp_path)
    (target / smollm2_hf.MARKER).write_text(json.dumps({"files": ["config.json", "gone.bin"]}))
    assert not smollm2_hf.is_complete(target)


def test_missing_packages_are_named_before_any_work(
    tmp_path: Path, smollm2_gguf_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("gguf", "accelerate") else real_find_spec(name, *a),
    )
    with pytest.raises(EngineError, match=r"missing: gguf, accelerate .*setup.sh --vllm-cpu"):
        smollm2_hf.build_hf_smollm2(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_command_line_prints_the_directory_or_a_one_line_error(tmp_path: Path, smollm2_gguf_path: Path) -> None:
    target = tmp_path / _target_name(smollm2_gguf_path)
    target.mkdir()
    (target / "config.json").write_text("{}")
    command = [sys.executable, "-m", "bias_discovery.smollm2_hf", str(tmp_path)]
    failed = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert failed.stderr.startswith("error: ") and "not a complete build" in failed.stderr

    (target / smollm2_hf.MARKER).write_text(json.dumps({"files": ["config.json"]}))
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{target}\n"


def test_importing_the_module_loads_no_heavy_package() -> None:
    probe = (
        "import sys, bias_discovery.smollm2_hf\n"
        "print(','.join(m for m in ('torch', 'transformers', 'gguf', 'accelerate', 'llama_cpp') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.model
@pytest.mark.slow
def test_real_conversion_gives_a_dense_model_with_the_chat_template(tmp_path: Path, smollm2_gguf_path: Path) -> None:
    missing = [n for n in smollm2_hf.BUILD_PACKAGES if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (./scripts/setup.sh --vllm-cpu)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = smollm2_hf.build_hf_smollm2(tmp_path)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    assert (model_dir / "model.safetensors").stat().st_size > 200_000_000  # bf16, not Q4_1

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        output = model.generate(**encoded, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0][encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
    assert smollm2_hf.build_hf_smollm2(tmp_path) == model_dir
