"""The installed package: resources found after a non-editable install; light imports."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO, link_built_models


def test_wheel_ships_prompts_libraries_and_demo_set_and_they_load(tmp_path: Path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("bias_discovery-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "bias_discovery/prompts/judge_pairwise.txt",
        "bias_discovery/prompts/perturb.txt",
        "bias_discovery/bias_library/biasscope7.json",
        "bias_discovery/bias_library/calm12.json",
        "bias_discovery/data/demo_pairs.jsonl",
        "bias_discovery/report/audit_template.html",
        "bias_discovery/export/templates/pro_card.md.j2",
        "bias_discovery/pages/page.css",
    ):
        assert expected in names, expected

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    probe = (
        "import bias_discovery, sys\n"
        f"assert bias_discovery.__file__.startswith({str(target)!r}), bias_discovery.__file__\n"
        "from bias_discovery.prompts import load_prompt\n"
        "from bias_discovery.library import load_seed_library\n"
        "from bias_discovery.data.loaders import load_pairs\n"
        "assert 'question' in load_prompt('judge_pairwise').placeholders\n"
        "assert len(load_seed_library('biasscope7').biases) == 7\n"
        "assert len(load_pairs('demo')) >= 40\n"
        "print('ok')\n"
    )
    # Run from an empty directory so nothing from the checkout can be picked up.
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_importing_the_package_and_cli_loads_no_heavy_module():
    probe = (
        "import sys\n"
        "import bias_discovery, bias_discovery.cli, bias_discovery.loop.graph, bias_discovery.stages\n"
        "import bias_discovery.llm.registry, bias_discovery.judging, bias_discovery.library\n"
        "heavy = [m for m in ('torch', 'vllm', 'llama_cpp', 'sentence_transformers', 'transformers', 'datasets', 'faiss') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_ci_runs_both_readme_commands_verbatim_and_the_quick_start_stays_free_of_vllm():
    """CI (.ci/run) reads the README's two quick-start blocks and runs them as they are: the test
    command (which installs vLLM's CPU build so the real-vLLM tier runs), then command 1, then the
    llama.cpp tier the test command leaves out; the first block installs no vLLM."""
    import re

    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```bash\n(.*?)\n```", quick_start, re.S)[:2]
    ci = (REPO / ".ci" / "run").read_text()
    assert 'readme.split("## Quick start", 1)[1]' in ci and 're.findall(r"```bash' in ci
    runs = [line for line in ci.splitlines() if line.startswith("bash -c ")]
    assert runs == ['bash -c "${quick_start[1]}"', 'bash -c "${quick_start[0]}"', 'bash -c "$llamacpp_tier"']
    assert "--vllm-cpu" in second and "pytest" in second
    # the llama.cpp compile is left out of the test command; CI runs its tier in a third command
    assert "--llamacpp" not in second
    [tier] = [line for line in ci.splitlines() if line.startswith("llamacpp_tier=")]
    assert "setup.sh --test --llamacpp" in tier and "-m llamacpp" in tier and "--all-tiers" not in tier
    assert "--all-tiers" in second  # plain pytest is the fast tier: CI runs every tier
    # two workers (tests/conftest.py's scheduler keeps the real-vLLM tier on one of them)
    assert "-n 2" in second
    assert first.startswith("./scripts/setup.sh") and "bias-discovery run experiments/quickstart-cpu.yaml" in first
    assert "vllm" not in first.lower()


@pytest.mark.model
def test_the_built_wheel_runs_the_embedded_judge_and_the_quick_start_outside_the_checkout(tmp_path: Path):
    """The wheel in a venv of its own, used from a folder outside the checkout: `judge` on the
    embedded model, and the quick-start config named as the README names it (shipped in the
    package). The venv borrows this environment's installed dependencies (a path entry, no
    editable install: only the wheel provides bias_discovery) so nothing is compiled again."""
    import site
    import sysconfig

    wheels = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("bias_discovery-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    venv_site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (venv_site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert site.ENABLE_USER_SITE is not None  # (the borrowed path is a plain entry: its .pth files are not run)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HOME": str(tmp_path),
        # a call cache of its own, with this machine's Hugging Face-format SmolLM2 linked in:
        # building it from the GGUF (tests/test_smollm2_hf.py) is not what this test is about
        "BIAS_DISCOVERY_CACHE_DIR": str(link_built_models(tmp_path / "cache")),
    }
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import bias_discovery; print(bias_discovery.__file__)"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(venv_site)), where
    judged = subprocess.run(
        [
            str(venv / "bin" / "bias-discovery"),
            "judge",
            "--model",
            "hf/smollm2",
            "--data",
            "demo",
            "--limit",
            "2",
            "--quiet",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert judged.returncode == 0, judged.stdout + judged.stderr
    ran = subprocess.run(
        [
            str(venv / "bin" / "bias-discovery"),
            "run",
            "experiments/quickstart-cpu.yaml",
            "--run-dir",
            "qs",
            "--quiet",
            "--set",
            "max_iterations=1",
            "--set",
            "data.target_limit=2",
            "--set",
            "data.test_limit=2",
            "--set",
            "validate.seeds=false",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (outside / "qs" / "run.json").is_file() and "finished" in ran.stdout
