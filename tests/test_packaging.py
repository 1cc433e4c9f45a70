"""The installed package: resources found after a non-editable install; light imports."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import REPO


def test_wheel_ships_prompts_libraries_and_demo_set_and_they_load(tmp_path: Path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = wheels.glob("bias_discovery-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("bias_discovery/prompts/judge_pairwise.txt", "bias_discovery/prompts/perturb.txt",
                     "bias_discovery/bias_library/biasscope7.json", "bias_discovery/bias_library/calm12.json",
                     "bias_discovery/data/demo_pairs.jsonl", "bias_discovery/report/audit_template.html",
                     "bias_discovery/export/templates/pro_card.md.j2", "bias_discovery/pages/page.css"):
        assert expected in names, expected

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
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
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
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


def test_ci_runs_the_readme_test_command_and_the_quick_start_stays_free_of_vllm():
    """CI (.ci/run) calls exactly the README's test command (quick start, second block), which
    installs vLLM's CPU build so the real-vLLM tier runs; the first block installs no vLLM."""
    import re

    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```bash\n(.*?)\n```", quick_start, re.S)[:2]
    ci_commands = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
                   if line and not line.startswith(("#", " ", "set ", "cd ", "if ", "fi"))]
    assert ci_commands[-1] == second
    assert "--vllm-cpu" in second and "pytest" in second
    assert "vllm" not in first.lower()
