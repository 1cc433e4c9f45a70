"""The HTML report and the live viewer: hostile model text, a real run, headless Chromium.

`build_hostile_run` writes a run directory by hand (library files through LibraryStore, a
validation.json, config.yaml, run.json, events.jsonl) in which every model-written field
tries to break out of the page: the report must show all of it as text.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from markupsafe import escape

from bias_discovery.judging import JudgeResult, Judgment, PairOutcome
from bias_discovery.library import (
    Bias,
    BiasLibrary,
    BiasOrigin,
    BiasValidation,
    Evidence,
)
from bias_discovery.report import collect_run, render_report, word_diff, write_report
from bias_discovery.report.render import write_bias_page
from bias_discovery.run import RunDir, RunState
from bias_discovery.run.reviews import Review
from bias_discovery.stages.merge import MergeDecision
from bias_discovery.stages.records import IdentifyRecord, PerturbedPair

from helpers import cli

SCRIPT = "<script>alert(1)</script>"
TEXTAREA = "</textarea><img src=x onerror=alert(2)>"
TEMPLATE = "{{ 7*7 }}"
PWN_SCRIPT = "<script>document.title='PWNED'</script>"
PWN_IMG = "<img src=x onerror=\"document.title='PWNED'\">"
HOSTILE = f"{SCRIPT} {TEXTAREA} {TEMPLATE} {PWN_SCRIPT} {PWN_IMG} </pre>--> ]]> [bold red]markup[/] $x^2$"

DOMAINS = ("math", "code", "knowledge")


def _old_validation(delta: float, accepted: bool, n: int = 30) -> dict:
    """A validation as libraries wrote it before the shared comparison type: the comparison vs
    the baseline flat on the record, no effect (the hostile run is an old run: it must still
    load and render)."""
    base = 0.3
    return {
        "n": n,
        "n_excluded_invalid": 1,
        "baseline_error": base,
        "perturbed_error": base + delta,
        "delta": delta,
        "ci_low": delta - 0.1,
        "ci_high": delta + 0.1,
        "p_value": 0.004 if accepted else 0.4,
        "p_adjusted": 0.012 if accepted else 0.8,
        "accepted": accepted,
        "rule": "mcnemar-holm(alpha=0.05)",
        "per_domain": {
            d: {
                "n": 10,
                "baseline_error": base,
                "perturbed_error": base + delta * (k + 1) / 2,
                "delta": delta * (k + 1) / 2,
                "p_value": 0.05,
            }
            for k, d in enumerate(DOMAINS)
        },
        "test_data": "hostile-test",
    }


def _validation(delta: float, accepted: bool, n: int = 30) -> BiasValidation:
    return BiasValidation.model_validate(_old_validation(delta, accepted, n))


def _evidence(pair_id: str, injected: str) -> Evidence:
    return Evidence(
        pair_id=pair_id,
        original_rejected="The answer is 41 because six times seven is 41.\nFinal answer: 41",
        perturbed_response=f"Experts agree: the answer is 41 {HOSTILE}\nFinal answer: 41",
        judge_explanation=f"Response A cites experts. {HOSTILE}",
        deeper_explanation=f"Deeper: I trusted the experts. {SCRIPT}",
        bias_injected=injected,
        order="rejected_first",
    )


def _record(bias: Bias) -> dict:
    """The bias's validation.json record as files wrote it before the shared comparison type."""
    v = bias.validation.vs_baseline
    comparison = {
        "n": v.n,
        "n_excluded_invalid": v.n_excluded_invalid,
        "baseline_error": v.control_error,
        "perturbed_error": v.arm_error,
        "delta": v.delta,
        "ci_low": v.ci_low,
        "ci_high": v.ci_high,
        "confidence": 0.95,
        "b_discordant_hurt": 5,
        "c_discordant_helped": 1,
        "p_value": v.p_value,
        "p_adjusted": v.p_adjusted,
        "accepted": bias.validation.accepted,
        "rule": bias.validation.rule,
    }
    per_domain = {
        d: {**comparison, "n": dv.n, "delta": dv.delta, "ci_low": dv.delta - 0.2, "ci_high": dv.delta + 0.2}
        for d, dv in bias.validation.per_domain.items()
    }
    return {
        "bias_id": bias.id,
        "name": bias.name,
        "n_perturb_invalid": 0,
        "comparison": comparison,
        "per_domain": per_domain,
    }


HOSTILE_ITEMS = ("p-01", "p-02", "p-03", "p-04")


def _hostile_validation_records(rd: RunDir, bias: Bias) -> None:
    """Iteration 1's validation rewrites of `bias` and the judge's verdicts on them and on the
    unchanged items (the baseline), every text hostile: the first two flip, the others do not."""
    rewrites, judgments, baseline, outcomes = [], [], [], []
    for k, pair_id in enumerate(HOSTILE_ITEMS):
        flips = k < 2
        rewrites.append(
            PerturbedPair(
                pair_id=pair_id,
                bias_id=bias.id,
                bias_name=bias.name,
                domain=DOMAINS[k % 3],
                question=f"Q{k} {HOSTILE}",
                chosen=f"42 {TEXTAREA}",
                original_rejected=f"The answer is 41. {PWN_IMG}",
                perturbed_rejected=f"Experts agree: the answer is 41. {PWN_IMG} {SCRIPT}",
                valid=True,
                answer_check="different",
                original_check="different",
                check_method="model",
            )
        )
        judgments.append(
            Judgment(
                pair_id=pair_id,
                domain=DOMAINS[k % 3],
                order="chosen_first",
                verdict="B" if flips else "A",
                picked="rejected" if flips else "chosen",
                correct=not flips,
                explanation=f"B cites experts {HOSTILE}",
                raw_output="x",
                prompt_tokens=1,
                completion_tokens=1,
            )
        )
        baseline.append(
            Judgment(
                pair_id=pair_id,
                domain=DOMAINS[k % 3],
                order="chosen_first",
                verdict="A",
                picked="chosen",
                correct=True,
                explanation=f"A is right {PWN_SCRIPT}",
                raw_output="x",
                prompt_tokens=1,
                completion_tokens=1,
            )
        )
        outcomes.append(PairOutcome(pair_id=pair_id, domain=DOMAINS[k % 3], correct=True, orders=["chosen_first"]))
    rd.iteration(1).validation_perturbed.write(rewrites)
    rd.iteration(1).validation_judgments.write(judgments)
    rd.baseline.result.write(JudgeResult(judgments=baseline, outcomes=outcomes))


def build_hostile_run(root: Path) -> Path:
    """A finished two-iteration run whose model-written text is hostile everywhere."""
    root.mkdir(parents=True)
    rd = RunDir(root)
    rd.config_path.write_text(
        "name: hostile-run\nseed: 7\n"
        "target: {provider: llamacpp, model: smollm2}\nteacher: {provider: openai, model: teacher-x, base_url: 'http://127.0.0.1:9/v1'}\n"
        "embedder: {model: all-MiniLM-L6-v2}\n"
        "data: {target: demo, test: judgebench, target_limit: 8, test_limit: 30, data_dir: null}\n"
        "seed_library: biasscope7\nmax_iterations: 3\njudge: {positions: swap}\n"
        "deeper_explain: {enabled: true}\nmerge: {top_k: 3, similarity_threshold: 0.75}\n"
        "validate: {when: early, acceptance: paired, alpha: 0.05, correction: holm, min_delta: 0.0, max_candidates: 3}\n"
    )
    rd.checkpoint_path.write_bytes(b"")
    now = time.time()
    rd.write_state(
        RunState(
            name="hostile-run",
            status="finished",
            iteration=2,
            stage="finished",
            stop_reason="converged: no candidate was accepted",
            library_size=4,
            accepted_total=2,
            started_at=now - 3725,
            updated_at=now,
        )
    )
    for it in (1, 2):
        for stage, role, calls in (("perturb", "teacher", 8), ("evaluate", "target", 8), ("validate", "target", 60)):
            rd.event("stage_start", iteration=it, stage=stage, total=calls)
            rd.event(
                "stage_end",
                iteration=it,
                stage=stage,
                total=calls,
                seconds=1.0,
                usage={
                    role: {
                        "requests": calls,
                        "cached": 1,
                        "prompt_tokens": 1000 * calls,
                        "completion_tokens": 50 * calls,
                    }
                },
            )
    rd.event("finished", iteration=2, stop_reason="converged: no candidate was accepted", library_size=4)

    seeds = [
        Bias(
            id="length-bias",
            name="Length Bias",
            definition="Longer is better.",
            origin=BiasOrigin(kind="seed", seed_library="biasscope7"),
        ),
        Bias(
            id="authority-bias",
            name="Authority Bias",
            definition="Experts are right.",
            origin=BiasOrigin(kind="seed", seed_library="biasscope7"),
        ),
    ]
    found1 = Bias(
        id="d1-expert-citation-bias",
        name=f"Expert Citation {SCRIPT}",
        definition=f"The judge trusts cited experts. {HOSTILE}",
        manifestations=[f"Cites a professor {TEXTAREA}"],
        origin=BiasOrigin(kind="discovered", iteration=1, target_model="hf/smollm2"),
        evidence=[
            _evidence("pair-01", "authority-bias"),
            _evidence("pair-02", "authority-bias"),
            _evidence("pair-03", "length-bias"),
        ],
        validation=_validation(0.2, True),
        merged_from=[f"d1-raw {TEMPLATE}", "authority-bias"],
    )
    rejected1 = Bias(
        id="d1-politeness-bias",
        name=f"Politeness {PWN_IMG}",
        definition=f"Polite answers win. {PWN_SCRIPT}",
        origin=BiasOrigin(kind="discovered", iteration=1, target_model="hf/smollm2"),
        evidence=[_evidence("pair-04", "length-bias")],
        validation=_validation(0.02, False),
    )
    found2 = Bias(
        id="d2-format-bias",
        name="Format Bias [bold red]markup[/] $\\frac{a}{",
        definition="Markdown wins.",
        origin=BiasOrigin(kind="discovered", iteration=2, target_model="hf/smollm2"),
        evidence=[_evidence("pair-05", "d1-expert-citation-bias")],
        validation=_validation(0.15, True),
    )
    store = RunDir(root).library
    lib0 = BiasLibrary(name="hostile-run", iteration=0, target_model="hf/smollm2", biases=seeds)
    store.save_iteration(lib0)
    lib1 = lib0.with_biases(seeds + [found1], iteration=1)
    store.save_iteration(lib1)
    lib2 = lib1.with_biases(lib1.biases + [found2], iteration=2)
    store.save_iteration(lib2)

    for it, validated in ((1, [found1, rejected1]), (2, [found2])):
        d = rd.iteration(it).directory
        d.mkdir()
        (d / "validation.json").write_text(
            json.dumps(
                {
                    "iteration": it,
                    "when": "early",
                    "acceptance": "paired",
                    "alpha": 0.05,
                    "correction": "holm",
                    "n_test": 31,
                    "baseline_error": 0.3,
                    "skipped_over_max_candidates": ["d1-skipped"] if it == 1 else [],
                    "accepted": [b.id for b in validated if b.validation.accepted],
                    "candidates": [_record(b) for b in validated],
                    "validated": [b.model_dump(mode="json") for b in validated],
                }
            )
        )
        (d / "merge_stats.json").write_text(
            json.dumps(
                {
                    "raw_candidates": 3,
                    "merged_into_library": {"d1-dup": "authority-bias"},
                    "candidates": len(validated),
                    "teacher_calls": 2,
                    "all_pairs_calls": 15,
                }
            )
        )
        cases = [
            {
                "pair_id": e.pair_id,
                "bias_id": e.bias_injected,
                "domain": "math",
                "question": f"What is 6*7? {HOSTILE}",
                "chosen": f"42 {TEXTAREA}",
                "original_rejected": e.original_rejected,
                "perturbed_rejected": e.perturbed_response,
                "order": "rejected_first",
                "verdict": "A",
                "judge_output": "x",
                "explanation": "x",
                "deeper_explanation": None,
            }
            for b in validated
            for e in b.evidence
        ]
        (d / "misjudged.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
        (d / "explanations.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    _hostile_validation_records(rd, found1)
    rd.iteration(1).identified.write(
        [
            IdentifyRecord(
                pair_id=e.pair_id,
                status="bias",
                name=f"Expert Citation {SCRIPT}",
                definition=f"Trusts experts {HOSTILE}",
                manifestations=[PWN_IMG],
            )
            for e in found1.evidence
        ]
    )
    rd.iteration(1).merges.write(
        [
            MergeDecision(
                candidate_id="d1-raw",
                other_id="d1-expert-citation-bias",
                other_kind="candidate",
                similarity=0.91,
                decision="same",
            )
        ]
    )
    rd.reviews.artifact.write(
        [
            Review(
                bias_id="d1-expert-citation-bias",
                bias_name=found1.name,
                decision="confirmed",
                note=f"looks right {HOSTILE}",
                reviewer=f"rev {PWN_SCRIPT}",
                reviewed_at="2026-01-02T03:04:05+00:00",
                library_iteration=2,
            ),
        ]
    )
    # a whole summary.json (the run's closing sentences read it): its damage is not one of the
    # three entries this run's readers must name
    (rd.baseline.directory / "summary.json").write_text(
        json.dumps(
            {
                "model": "hf/smollm2",
                "data": "demo:test",
                "positions": "swap",
                "seed": 42,
                "n_pairs": 30,
                "n_valid_pairs": 30,
                "n_judgments": 30,
                "n_invalid_judgments": 0,
                "invalid_reasons": {},
                "error_rate": 0.3,
                "error_ci_low": 0.17,
                "error_ci_high": 0.48,
                "invalid_rate": 0.0,
                "error_rate_invalid_as_error": 0.3,
                "position_a_rate": 0.5,
                "position_consistency": None,
                "per_domain": {
                    d: {"n": 10, "n_valid": 10, "error_rate": 0.3, "ci_low": 0.1, "ci_high": 0.6} for d in DOMAINS
                },
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached_calls": 0,
            }
        )
    )
    return root


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    return build_hostile_run(tmp_path / "hostile")


def _text_only(html: str) -> str:
    return re.sub(r'src="data:[^"]*"', 'src="data:..."', html)


def test_hostile_text_is_escaped(hostile_run: Path):
    html = render_report(hostile_run)
    body = _text_only(html)
    # Raw tags never reach the page; their escaped forms do.
    assert "<script>alert" not in body
    assert "<script>document" not in body
    assert "<img src=x" not in body and '<img src="x"' not in body
    assert "</textarea>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;/textarea&gt;&lt;img src=x onerror=alert(2)&gt;" in body
    assert "onerror=&#34;document.title=&#39;PWNED&#39;&#34;" in body or "onerror=&quot;" in body
    # The per-bias panel's new parts: the examples, the teacher's identification, the review.
    assert "Examples from validation" in body and "<b>2 flipped</b>" in body
    assert "B cites experts &lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "The teacher's identification." in body and "Trusts experts &lt;script&gt;" in body
    assert "looks right &lt;script&gt;" in body and "rev &lt;script&gt;document.title" in body
    assert 'class="badge r-confirmed"' in body
    # Template syntax in model text is shown literally, never evaluated.
    assert "{{ 7*7 }}" in body
    assert "d1-raw {{ 7*7 }}" in body and "d1-raw 49" not in body and "41 49" not in body
    # The static report has no script of its own, and no external resource.
    assert "<script" not in body
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(" not in html


def test_report_sections_and_content(hostile_run: Path):
    html = render_report(hostile_run)
    for anchor in (
        'id="run"',
        'id="library"',
        'id="plots"',
        'id="discovered"',
        'id="rejected"',
        'id="seeds"',
        'id="config"',
    ):
        assert anchor in html
    # header: models, data, settings, stop reason, calls and tokens
    assert "hf/smollm2" in html and "openai/teacher-x" in html
    assert "judgebench (first 30 pairs)" in html
    assert "converged: no candidate was accepted" in html
    assert "1h 02m 05s" in html
    assert ">152<" in html  # total requests: 2 iterations x (8 + 8 + 60)
    assert ">152,000<" in html  # prompt tokens
    # plots are embedded SVG images
    assert html.count('src="data:image/svg+xml;base64,') == 2
    assert 'id="plot-iterations"' in html and 'id="plot-delta"' in html
    # numbers, decisions, provenance
    assert "+20.0 pp" in html and "[+10.0, +30.0]" in html
    assert "d1-politeness-bias" in html and "b-rejected" in html
    assert "d1-skipped" in html
    assert "d1-dup" in html
    assert "d1-raw {{ 7*7 }}" in html  # merged_from
    # evidence: side-by-side word diff and the judge's explanations
    assert "<ins>Experts agree: </ins>" in html or "<ins>Experts agree:" in html
    assert "<del>The </del>" in html or "<del>The" in html
    assert "Response A cites experts." in html and "Deeper: I trusted the experts." in html
    assert "What is 6*7?" in html  # the question, looked up from explanations.jsonl
    # per-domain table
    assert "knowledge" in html and "+30.0 pp" in html


def test_word_diff_marks_changed_words():
    left, right = word_diff("the answer is 41", "clearly the answer is 41 <b>")
    assert left == [("eq", "the answer is 41")]
    assert right == [("ins", "clearly "), ("eq", "the answer is 41"), ("ins", " <b>")]
    left, right = word_diff("a b c", "a x c")
    assert ("del", "b") in left and ("ins", "x") in right


def test_write_report_default_path_and_collect(hostile_run: Path):
    path = write_report(hostile_run)
    assert path == hostile_run / "report.html" and path.stat().st_size > 10_000
    run = collect_run(hostile_run)
    assert [lib.iteration for lib in run.libraries] == [0, 1, 2]
    assert [b.id for b in run.rejected] == ["d1-politeness-bias"]
    assert [b.id for b in run.discovered] == ["d1-expert-citation-bias", "d2-format-bias"]


def test_report_cli(hostile_run: Path, tmp_path: Path):
    out = tmp_path / "sub" / "r.html"
    result = cli("report", str(hostile_run), "--out", str(out))
    assert "wrote" in result.stdout and out.is_file()
    bad = cli("report", str(tmp_path / "missing"), check=False)
    assert bad.returncode == 2 and "no such run directory" in bad.stderr


def test_the_api_report_writes_the_page_its_directory_calls_for(hostile_run: Path, tmp_path: Path):
    """`api.report` (what `bias-discovery report` calls): a run's page, one bias's page, and no
    bias page of an audit directory (the CLI names the setting as its flag, exit 2)."""
    from bias_discovery.api import report
    from bias_discovery.errors import ConfigError

    problems: list[str] = []
    assert report(hostile_run, problems=problems) == hostile_run / "report.html"
    page = report(hostile_run, bias="d1-expert-citation-bias")
    assert page == RunDir(hostile_run).bias_page_path("d1-expert-citation-bias") and page.is_file()
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir()
    (audit_dir / "audit.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^`bias`: .* is an audit directory"):
        report(audit_dir, bias="position")
    bad = cli("report", str(audit_dir), "--bias", "position", check=False)
    assert bad.returncode == 2, bad.stderr
    assert f"--bias: {audit_dir} is an audit directory; a bias page is drawn from a run" in " ".join(bad.stderr.split())
    assert not (audit_dir / "report.html").exists()


def test_report_of_a_run_in_progress(hostile_run: Path):
    rd = RunDir(hostile_run)
    state = rd.read_state()
    rd.write_state(
        state.model_copy(update={"status": "running", "stage": "perturb", "iteration": 3, "stop_reason": None})
    )
    rd.event("stage_start", iteration=3, stage="perturb", total=8)
    rd.event("progress", iteration=3, stage="perturb", done=5, total=8)
    with rd.lock.hold(rd.root, "resume"):  # this process drives the run
        html = render_report(hostile_run)
    assert "In progress: iteration 3, stage <b>perturb</b>, 5/8" in html
    assert 'class="badge b-running"' in html
    # The same files with no live process behind them (a kill): stopped, not "in progress".
    html = render_report(hostile_run)
    assert "In progress" not in html and 'class="badge b-running"' not in html and 'class="badge b-stopped"' in html
    assert "its process is gone: <code>bias-discovery resume</code> continues it" in html


# --------------------------------------------------------------------------------------------
# Headless Chromium
# --------------------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess:
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={user_data}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)")
def test_report_in_headless_chromium(hostile_run: Path, tmp_path: Path):
    report = write_report(hostile_run, tmp_path / "report.html")
    url = report.resolve().as_uri()
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
    assert "PWNED" not in title and title.startswith("hostile-run")
    # No injected element made it into the DOM; the text did, as text.
    assert "<script" not in html
    assert '<img src="x"' not in html
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in html
    assert "{{ 7*7 }}" in html
    # The plots and the evidence are there.
    assert html.count('<img class="plot"') == 2
    assert "Judge's explanation" in html and "<ins>" in html and "<del>" in html

    shot = tmp_path / "report.png"
    result = _chromium(f"--screenshot={shot}", "--window-size=1280,2000", url, user_data=tmp_path / "profile-shot")
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 30_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)")
def test_a_bias_page_in_headless_chromium(hostile_run: Path, tmp_path: Path):
    """The page of one bias (`report --bias`), every model-written text hostile: no injected
    element runs or reaches the DOM, the text shows as text, and the page draws."""
    page = write_bias_page(hostile_run, "d1-expert-citation-bias", tmp_path / "bias.html")
    url = page.resolve().as_uri()
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
    assert "PWNED" not in title and title.startswith("hostile-run")
    assert "<script" not in html and '<img src="x"' not in html and "<img " not in html
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in html and "{{ 7*7 }}" in html
    assert 'id="bias-d1-expert-citation-bias"' in html and html.count('class="card ') == 1
    assert "Examples from validation" in html and "the judge with the bias" in html and "<ins>" in html
    assert "review: confirmed" in html and "The teacher's identification." in html
    shot = tmp_path / "bias.png"
    result = _chromium(f"--screenshot={shot}", "--window-size=1280,2400", url, user_data=tmp_path / "profile-shot")
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 30_000
    layout, _ = layout_at(page, 1300, tmp_path)
    assert layout["page"] <= 1300 and layout["overflowing"] == [], layout


_MEASURE = """<script>
window.addEventListener("load", () => {
  const overflowing = [];
  for (const table of document.querySelectorAll("table")) {
    const card = table.closest("section, .card");
    const scroller = table.closest(".scroll");
    const right = (scroller || table).getBoundingClientRect().right;
    if (right > card.getBoundingClientRect().right + 0.5) overflowing.push((card.id || card.className) + ": " + table.rows[0].textContent.slice(0, 60));
  }
  const scrolling = [...document.querySelectorAll(".scroll")].filter(s => s.scrollWidth > s.clientWidth)
    .map(s => (s.closest("section, .card").id || "card") + ": " + s.querySelector("table").rows[0].textContent.slice(0, 60));
  document.body.setAttribute("data-layout", JSON.stringify({page: document.documentElement.scrollWidth, window: window.innerWidth, overflowing, scrolling}));
});
</script>"""


def layout_at(report: Path, width: int, tmp_path: Path) -> tuple[dict, Path]:
    """How a report lays out in headless Chromium in a window `width` px wide: the page's
    scroll width and the tables that stick out of their card (measured by a script added to a
    copy of the page, whose policy forbids scripts), and a screenshot."""
    page = report.read_text(encoding="utf-8")
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace(
        "</body>", _MEASURE + "</body>"
    )
    probe = tmp_path / f"measure-{report.name}"
    probe.write_text(page, encoding="utf-8")
    dom = _chromium(
        f"--window-size={width},1600", "--dump-dom", probe.resolve().as_uri(), user_data=tmp_path / "profile-layout"
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', dom.stdout)
    assert found, dom.stdout[-2000:]
    shot = tmp_path / f"{report.stem}-{width}.png"
    result = _chromium(
        f"--screenshot={shot}",
        f"--window-size={width},1600",
        report.resolve().as_uri(),
        user_data=tmp_path / "profile-layout-shot",
    )
    assert result.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", result.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"')), shot


def right_margin_is_blank(shot: Path, margin: int) -> bool:
    """Nothing drawn in the screenshot's rightmost `margin` px (the page's background there)."""
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    strip = image.crop((image.width - margin, 0, image.width, image.height))
    return len(set(strip.getdata())) == 1


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)")
def test_report_tables_fit_a_1300px_window(hostile_run: Path, tmp_path: Path):
    """The library table (11 columns, long names and ids) used to push the page to 1514 px in a
    1300 px window; now every table wraps or scrolls inside its card."""
    report = write_report(hostile_run, tmp_path / "report.html")
    layout, shot = layout_at(report, 1300, tmp_path)
    assert layout["window"] == 1300 and layout["page"] <= 1300, layout
    assert layout["overflowing"] == [], layout
    assert not [t for t in layout["scrolling"] if t.startswith("library")], layout  # it even fits: no scroll bar


# --------------------------------------------------------------------------------------------
# The live viewer
# --------------------------------------------------------------------------------------------


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as reply:
        assert reply.status == 200
        return reply.read().decode("utf-8")


def test_viewer_serves_and_refreshes(hostile_run: Path):
    from bias_discovery.report.viewer import ReportServer

    rd = RunDir(hostile_run)
    rd.write_state(rd.read_state().model_copy(update={"status": "running", "stage": "validate"}))
    server = ReportServer(hostile_run, port=0).start()
    try:
        with rd.lock.hold(rd.root, "resume"):  # the run's process is this one: the page follows it
            assert server.port != 0
            page = _get(server.url)
            assert "hostile-run" in page and 'fetch("/version"' in page
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
            version = json.loads(_get(server.url + "version"))
            assert version["status"] == "running"
            assert _get(server.url) == page and server.renders == 1  # unchanged files: no re-render

            rd.event("stage_start", iteration=3, stage="identify", total=4)
            page2 = _get(server.url)
            assert page2 != page and "stage <b>identify</b>" in page2
            assert json.loads(_get(server.url + "version"))["version"] != version["version"]

            # a broken library file: an error page that keeps polling, then recovery
            latest = hostile_run / "library" / "iter_002.json"
            good = latest.read_text()
            latest.write_text(good[:50])
            broken = _get(server.url)
            assert "cannot be drawn" in broken and "iter_002.json" in broken
            latest.write_text(good)
            rd.event("progress", iteration=3, stage="identify", done=2, total=4)
            assert "stage <b>identify</b>, 2/4" in _get(server.url)
            with pytest.raises(urllib.error.HTTPError):
                _get(server.url + "nope")
    finally:
        server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=2)


def test_view_command_serves_and_stops_on_ctrl_c(hostile_run: Path):
    import signal
    import sys

    from helpers import REPO

    process = subprocess.Popen(
        [sys.executable, "-m", "bias_discovery.cli", "view", str(hostile_run), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        # as in a terminal: a suite started in the background (`cmd &`) inherits SIGINT ignored,
        # and Python then installs no Ctrl-C handler in the child
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = process.stdout.readline()
        assert "serving" in line and "http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        assert "hostile-run" in _get(url)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=20)
        assert process.returncode == 0 and "stopped" in out and "Traceback" not in out
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------------------------
# A real (small) run
# --------------------------------------------------------------------------------------------


@pytest.mark.model
def test_report_from_a_real_run(small_real_run: Path, tmp_path: Path):
    out = tmp_path / "real.html"
    result = cli("report", str(small_real_run), "--out", str(out))
    assert "wrote" in result.stdout
    html = out.read_text()
    for anchor in ('id="run"', 'id="library"', 'id="plots"', 'id="discovered"', 'id="rejected"', 'id="seeds"'):
        assert anchor in html
    assert "hf/smollm2" in html and "small-real" in html
    assert 'id="plot-iterations"' in html
    assert "Length Bias" in html  # a biasscope7 seed
    # the quick start's report shows the placebo and the power
    assert 'id="validation"' in html and 'id="rewrite-effect"' in html and "placebo error" in html
    # SmolLM2 wrote and checked the rewrites: the report says so
    assert 'id="answer-check"' in html and "self-checked: that model is the teacher that wrote the rewrites" in html
    assert "Power per validation" in html or not collect_run(small_real_run).iterations[-1].validation.candidates
    run = collect_run(small_real_run)
    validated = run.discovered + run.rejected
    if validated:
        assert 'id="plot-delta"' in html
        for bias in validated:
            assert f'id="bias-{bias.id}"' in html
    # the quick start's report says what its validations control, and each bias's reported
    # effect with its method
    statement = RunDir(small_real_run).iteration(1).validation.read().error_statement
    assert statement.startswith("Family-wise error over the run")
    assert 'id="error-statement"' in html and str(escape(statement)) in html
    for bias in validated:
        assert f'id="effect-{bias.id}"' in html and str(escape(bias.validation.effect.method)) in html
        assert bias.validation.effect.clipped is None or str(escape(bias.validation.effect.clipped)) in html
    assert "<script" not in _text_only(html)
    assert not (small_real_run / "report.html").exists()  # --out respected; the fixture is read-only
    # the page opens with the three sentences the run ended with: the judge's position
    # preference measured on the test pairs (with its n and CI), what could not be detected at
    # this n, what a real run needs; and the rewrites' quality
    from bias_discovery.report.summary import run_summary

    summary = run_summary(small_real_run)
    outcome = html.index('id="outcome"')
    assert outcome < html.index("<h2>Run</h2>")
    for sentence in summary.sentences():
        assert str(escape(sentence)) in html
    assert summary.position is not None and "95 % CI" in summary.found and "test pairs" in summary.found
    assert "Rewrite quality:" in html and "biasscope-qwen-1gpu.yaml" in html
