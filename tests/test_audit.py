"""`bias-discovery audit`: the measures on scripted judges whose biases are known exactly, what
`--biases` accepts, bad input, the report of an audit directory, and a real audit of the
embedded model (SmolLM2 picks A nearly always: its z and PB must come out large)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import pytest
from test_report import CHROMIUM, HOSTILE, _chromium, layout_at

from bias_discovery.auditing import AuditSettings, resolve_targets, run_audit
from bias_discovery.auditing.display import metric_rows
from bias_discovery.auditing.output import read_audit, write_audit_dir
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import ConfigError, DataError
from bias_discovery.library import Bias, BiasLibrary, BiasOrigin, BiasValidation, save_library
from bias_discovery.metrics import flipping_noise
from bias_discovery.report.audit import render_audit, write_audit_report
from bias_discovery.run import RunDir

from fakes import MARKER, ScriptedEngine, _responses, authority_world
from helpers import cli, cli_in_process

DOMAINS = ["math", "code"]


def pairs(n: int, *, chosen_words: int = 3, rejected_words: int = 3) -> list[PreferencePair]:
    return [
        PreferencePair(
            id=f"p{i}",
            question=f"Question {i}?",
            chosen="RIGHT " + " ".join(["x"] * (chosen_words - 1)) + f" {i}",
            rejected="Wrong " + " ".join(["y"] * (rejected_words - 1)) + f" {i}",
            domain=DOMAINS[i % 2],
        )
        for i in range(n)
    ]


def always_a(request):
    return "Reasoning: the first one.\nVerdict: A"


def settings(**kw) -> AuditSettings:
    return AuditSettings(n_boot=200, **kw)


def audit(engine, ps, spec, teacher=None, **kw):
    return run_audit(
        engine,
        ps,
        resolve_targets(spec),
        settings(**kw),
        model="fake/judge",
        data="test",
        teacher=teacher,
        teacher_spec="fake/teacher" if teacher else None,
    )


def by_id(output, bias_id):
    return next(e for e in output.report.biases if e.id == bias_id)


# ------------------------------------------------------------------------------------------
# Built-ins on scripted judges
# ------------------------------------------------------------------------------------------


def test_a_judge_that_always_picks_a_has_the_largest_position_bias():
    out = audit(ScriptedEngine(always_a), pairs(6), "position", repeats=2)
    e = by_id(out, "position")
    # 6 pairs, each picking the first position in both orders: F = 6, S = 0, z = (6 - 1) / sqrt(6)
    assert e.z.value == pytest.approx(5 / math.sqrt(6)) and e.z.n == 6 and e.position_flag is True
    assert e.first_win_rate.value == 1.0 and e.first_win_rate.n == 6 and e.z.n_excluded == 0
    # right whenever the chosen response is first, never when it is second
    assert (e.p_cr.value, e.p_rc.value, e.acc_both.value) == (1.0, 0.0, 0.0)
    assert e.pb.value == 1.0 and e.pb_raw.value == 1.0 and e.q_hat.value == 0.0 and e.q_solved.value == 0.0
    # the noise rests on the items with 2 valid repeats: per order 6, pooled 6 x 2 item-orders
    assert (e.q_hat_cr.n, e.q_hat_rc.n, e.q_hat.n, e.pb.n) == (6, 6, 12, 6)
    # CALM: the other order always flips the preferred response; a new seed never does
    assert (e.rr.value, e.cr.value) == (0.0, 1.0)
    assert e.calls_per_verdict == 1 and e.calls == 6 * 2 * 2 and out.report.calls.judge == 24
    assert set(e.per_domain) == {"math", "code"} and e.per_domain["math"].z.n == 3
    assert e.mitigated is None


@pytest.mark.parametrize("mitigation", ["swap", "shuffle3", "votes6"])
def test_mitigations_measured_on_the_same_items(mitigation):
    out = audit(ScriptedEngine(always_a), pairs(4), "position", repeats=2, mitigation=mitigation)
    e = by_id(out, "position")
    m = e.mitigated
    assert m.scheme == mitigation and m.calls_per_verdict == {"swap": 2, "shuffle3": 3, "votes6": 6}[mitigation]
    assert e.pb.value == 1.0  # the unmitigated judge, on the same items
    if mitigation == "shuffle3":
        # first, swapped, first: the first position wins 2 of 3 votes -> still a position bias
        assert m.pb.value == 1.0 and m.tie_rate.value == 0.0
    else:
        # every verdict is a tie: no position bias left, and nothing right either
        assert m.pb.value == 0.0 and m.tie_rate.value == 1.0 and m.acc_both.value == 0.0
        assert m.z.n == 0 and m.z.value is None
    # swap's calls are the calls the plain audit makes anyway (both orders); the others add some
    assert (m.calls == e.calls) is (mitigation == "swap")


def noisy(request):
    """Right or wrong by a coin keyed on the seed and the question: repeats disagree."""
    a, _ = _responses(request.messages[-1].content)
    coin = hashlib.sha256(f"{request.seed}:{request.messages[-1].content}".encode()).digest()[0] / 255
    right_letter = "A" if "RIGHT" in a else "B"
    wrong_letter = "B" if right_letter == "A" else "A"
    return "Verdict: " + (right_letter if coin < 0.7 else wrong_letter)


def test_flipping_noise_from_repeats_with_new_seeds(tmp_path):
    K = 4
    out = audit(ScriptedEngine(noisy), pairs(10), "position", repeats=K)
    e = by_id(out, "position")
    seeds = {j.seed for j in out.judgments}
    assert len(seeds) == K  # every repeat asked with its own seed (the cache keys on it)
    # q̂_cr recomputed from the judgments: k = repeats that picked the first response (A)
    counts = []
    for i in range(10):
        picks = [j for j in out.judgments if j.pair_id == f"p{i}" and j.order == "chosen_first"]
        counts.append((sum(j.verdict == "A" for j in picks), len(picks)))
    assert e.q_hat_cr.value == pytest.approx(flipping_noise(counts)) and e.q_hat_cr.value > 0
    assert e.q_solved_cr.value == pytest.approx((1 - math.sqrt(1 - 2 * e.q_hat_cr.value)) / 2)
    assert e.cr.value < 1.0
    assert e.q_hat_cr.ci_low <= e.q_hat_cr.value <= e.q_hat_cr.ci_high


def longer(request):
    a, b = _responses(request.messages[-1].content)
    return "Verdict: " + ("A" if len(a.split()) >= len(b.split()) else "B")


def test_a_judge_that_picks_the_longer_response_has_a_length_bias():
    ps = pairs(4, chosen_words=12, rejected_words=2) + [
        p.model_copy(update={"id": f"q{p.id}"}) for p in pairs(4, chosen_words=2, rejected_words=12)
    ]
    e = by_id(audit(ScriptedEngine(longer), ps, "length", repeats=2), "length")
    # chosen longer: right in both orders; chosen shorter: wrong in both -> LB = 1 - 0
    assert (e.p_plus.value, e.p_plus.n, e.p_minus.value, e.p_minus.n) == (1.0, 4, 0.0, 4)
    assert e.lb.value == 1.0 and e.lb_raw.value == 1.0
    assert (e.q_hat_plus.n, e.q_hat_minus.n, e.q_hat.n, e.q_hat_plus.value) == (4, 4, 8, 0.0)
    # one point per pair (8): length difference +10 with the chosen share 1, -10 with share 0;
    # permuting 8 items separates the two groups perfectly in 2 of C(8, 4) = 70 orders
    assert e.spearman_rho.n == 8 and e.spearman_rho.value == 1.0 and e.spearman_p == pytest.approx(2 / 70, abs=0.01)
    assert e.length_flag is True
    assert e.asr_variant is None


# ------------------------------------------------------------------------------------------
# Library biases (teacher) on a scripted world with one real bias
# ------------------------------------------------------------------------------------------


def authority_or_cheer(request):
    """The authority world's teacher, who also carries sentiment (a cheerful closing line the
    judge ignores): an unchanged rewrite would test nothing, and is invalid."""
    user = request.messages[-1].content
    if "Trait:" in user and "sentiment" in re.search(r"Trait: (.*)", user).group(1).lower():
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        return f"{original} What a lovely question!"
    return authority_world(request)


def test_an_injected_bias_the_judge_falls_for_and_one_it_ignores():
    teacher = ScriptedEngine(authority_or_cheer, engine_id="fake/teacher")
    out = audit(
        ScriptedEngine(authority_world),
        pairs(6),
        "authority-bias,sentiment-bias,misinformation-oversight-bias",
        teacher=teacher,
    )
    hit, ignored, fe = (
        by_id(out, "authority-bias"),
        by_id(out, "sentiment-bias"),
        by_id(out, "misinformation-oversight-bias"),
    )
    assert all(MARKER in p.perturbed_rejected for p in out.perturbed if p.bias_id == "authority-bias")
    # y: always the chosen response; ŷ: always the perturbed rejected one
    assert (hit.acc_ori.value, hit.acc_hack.value, hit.rr.value, hit.cr.value) == (1.0, 0.0, 0.0, 1.0)
    d = hit.delta_error
    assert (d.delta, d.b_discordant_hurt, d.c_discordant_helped, d.n) == (1.0, 6, 0, 6)
    assert d.p_value == pytest.approx(0.5**6)
    assert hit.asr.value == 1.0 and hit.asr.n == 6 and hit.asr_variant == "preference_shift"
    assert (ignored.delta_error.delta, ignored.rr.value, ignored.asr.value) == (0.0, 1.0, 0.0)
    # the factual-error variant: V2 = control preferring the rejected response (or tie): none here
    assert fe.asr_variant == "factual_error" and fe.asr.n == 0 and fe.asr.value is None
    assert out.report.teacher == "fake/teacher" and out.report.calls.teacher == 18
    # calls: original base order x 2 repeats + perturbed base order, per item
    assert hit.calls == 6 * 3


def test_invalid_rewrites_are_left_out_and_counted():
    def teacher(request):
        user = request.messages[-1].content
        return "" if "Question 1?" in user else authority_world(request)

    out = audit(ScriptedEngine(authority_world), pairs(4), "authority-bias", teacher=ScriptedEngine(teacher))
    e = by_id(out, "authority-bias")
    assert e.n_items == 3 and e.n_perturb_invalid == 1 and e.delta_error.n == 3


def test_compared_measures_rest_on_the_items_valid_in_every_arm(tmp_path):
    """A judge whose verdict is invalid in one arm only on some items: every compared measure
    leaves those items out of both arms and says how many it left out."""

    def flaky(request):
        user = request.messages[-1].content
        a, b = _responses(user)
        perturbed = MARKER in a or MARKER in b
        if (perturbed and "Question 1?" in user) or (not perturbed and "Question 2?" in user and request.seed == 0):
            return "I cannot decide."  # no verdict: invalid
        if "Question 3?" in user and not perturbed:
            return "Verdict: " + ("B" if "RIGHT" in a else "A")  # wrong on the original
        return authority_world(request)

    teacher = ScriptedEngine(authority_world, engine_id="fake/teacher")
    out = audit(ScriptedEngine(flaky), pairs(6), "authority-bias", teacher=teacher, seed=0)
    e = by_id(out, "authority-bias")
    # y invalid on item 2, ŷ invalid on item 1: Acc_ori and Acc_hack both on items 0, 3, 4, 5
    # (y right on 3 of 4, ŷ never), as Δerror; alone, y would rest on 5 items and ŷ on 5 others
    assert (e.acc_ori.n, e.acc_hack.n, e.delta_error.n) == (4, 4, 4)
    assert (e.acc_ori.n_excluded, e.acc_hack.n_excluded, e.delta_error.n_excluded_invalid) == (2, 2, 2)
    assert (e.acc_ori.value, e.acc_hack.value) == (0.75, 0.0)
    assert e.acc_ori.value - e.acc_hack.value == pytest.approx(e.delta_error.delta)  # err(ŷ) - err(y)
    assert (e.rr.n, e.rr.n_excluded, e.asr.n_excluded) == (4, 2, 2)

    # position: the chosen-second order invalid on item 1 at repeat 1
    def flaky_order(request):
        a, _ = _responses(request.messages[-1].content)
        if "Question 1?" in request.messages[-1].content and "RIGHT" not in a and request.seed == 0:
            return "no verdict"
        return noisy(request)

    position_out = audit(ScriptedEngine(flaky_order), pairs(8), "position", repeats=3, seed=0)
    p = by_id(position_out, "position")
    assert (p.p_cr.n, p.p_rc.n, p.acc_both.n, p.pb.n, p.pb.n_excluded, p.p_cr.n_excluded, p.z.n_excluded) == (
        7,
        7,
        7,
        7,
        1,
        1,
        1,
    )
    assert p.pb_raw.value == pytest.approx(p.p_cr.value - p.p_rc.value)
    # shown next to the n: in the table's rows, audit.csv and the report
    rows = {r["field"]: r for r in metric_rows(p, "position")}
    assert (rows["p_cr"]["n"], rows["p_cr"]["excluded"], rows["q_hat"]["excluded"]) == ("7", "1 left out", "")
    directory = write_audit_dir(tmp_path / "audit", position_out)
    csv_row = next(
        r for r in csv.DictReader((directory / "audit.csv").open()) if r["metric"] == "p_rc" and r["scope"] == "all"
    )
    assert (csv_row["n"], csv_row["n_excluded"]) == ("7", "1")
    assert "n 7, 1 left out" in render_audit(directory)


# ------------------------------------------------------------------------------------------
# What --biases accepts
# ------------------------------------------------------------------------------------------


def test_resolve_targets():
    ids = [t.id for t in resolve_targets("position,length,calm12")]
    assert ids[:2] == ["position", "length"] and len(ids) == 14 and "bandwagon-bias" in ids
    assert [t.id for t in resolve_targets("Authority Bias")] == ["authority-bias"]
    assert [t.id for t in resolve_targets("authority-bias,biasscope7")][0] == "authority-bias"
    assert len(resolve_targets("authority-bias,biasscope7")) == 7  # each id once
    assert not resolve_targets("position")[0].needs_teacher and resolve_targets("gender-bias")[0].needs_teacher


def test_an_unknown_bias_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        resolve_targets("position,no-such-bias")
    message = str(info.value)
    assert "no-such-bias" in message
    for known in ("position", "length", "calm12", "chen4", "biasscope7", "social5", "authority-bias", "run directory"):
        assert known in message


def _bias(bias_id: str, accepted: bool | None, definition: str = "Prefers X.") -> Bias:
    validation = None
    if accepted is not None:
        validation = BiasValidation(
            n=10, baseline_error=0.2, perturbed_error=0.5, delta=0.3, accepted=accepted, rule="paired"
        )
    origin = BiasOrigin(kind="discovered", iteration=1) if accepted is not None else BiasOrigin(kind="seed")
    return Bias(
        id=bias_id, name=bias_id.replace("-", " ").title(), definition=definition, origin=origin, validation=validation
    )


def test_a_run_directory_gives_its_validated_biases_and_a_file_all_of_its_own(tmp_path):
    store = RunDir(tmp_path / "run").library
    store.save_iteration(BiasLibrary(name="r", iteration=0, biases=[_bias("length-bias", None)]))
    store.save_iteration(
        BiasLibrary(
            name="r", iteration=1, biases=[_bias("length-bias", None), _bias("d1-good", True), _bias("d1-bad", False)]
        )
    )
    assert [t.id for t in resolve_targets(str(tmp_path / "run"))] == ["d1-good"]
    file = save_library(
        BiasLibrary(name="mine", biases=[_bias("a-bias", None), _bias("b-bias", None)]), tmp_path / "mine.json"
    )
    targets = resolve_targets(str(file))
    assert [t.id for t in targets] == ["a-bias", "b-bias"] and targets[0].source == "mine"
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="broken.json"):
        resolve_targets(str(broken))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty"):
        resolve_targets(str(tmp_path / "empty"))


def test_repeats_below_two_are_an_error():
    with pytest.raises(ConfigError, match="`repeats` 1"):
        audit(ScriptedEngine(always_a), pairs(2), "position", repeats=1)


def test_library_biases_need_a_teacher():
    with pytest.raises(ConfigError, match="`teacher`"):
        audit(ScriptedEngine(always_a), pairs(2), "position,authority-bias")


def _bad(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    result = cli("audit", "--model", "hf/smollm2", "--data", "demo", "--out", str(out), *args, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert not out.exists(), "something was written to --out"
    return " ".join(result.stderr.split())


def test_bad_input_on_the_command_line(tmp_path):
    message = _bad(tmp_path, "--biases", "position,nosuch")
    assert "nosuch" in message and "calm12" in message and "authority-bias" in message and "length" in message
    assert "--repeats" in _bad(tmp_path, "--biases", "position", "--repeats", "1")
    assert "--teacher" in _bad(tmp_path, "--biases", "authority-bias")
    assert "shuffle3" in _bad(tmp_path, "--biases", "position", "--mitigation", "sideways")
    assert "demo" in _bad(tmp_path, "--biases", "position", "--data", "no-such-set")


# ------------------------------------------------------------------------------------------
# The audit directory and its report
# ------------------------------------------------------------------------------------------


@pytest.fixture
def hostile_audit(tmp_path: Path) -> Path:
    """An audit directory whose bias definition, rewrites and explanations try to break out."""
    library = save_library(
        BiasLibrary(name="hostile", biases=[_bias("authority-bias", None, definition=f"Defined as {HOSTILE}")]),
        tmp_path / "hostile.json",
    )

    def judge(request):
        a, b = _responses(request.messages[-1].content)
        pick = (
            "A"
            if (MARKER in a) != (MARKER in b) and MARKER in a
            else ("B" if MARKER in b else ("A" if "RIGHT" in a else "B"))
        )
        return f"Reasoning: {HOSTILE}\nVerdict: {pick}"

    def teacher(request):
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", request.messages[-1].content, re.S).group(1)
        return f"{original} {HOSTILE} {MARKER}"

    out = run_audit(
        ScriptedEngine(judge),
        pairs(4),
        resolve_targets(f"position,length,{library}"),
        settings(mitigation="swap"),
        model="fake/judge",
        data="test",
        teacher=ScriptedEngine(teacher),
        teacher_spec="fake/teacher",
    )
    return write_audit_dir(tmp_path / "audit", out)


def test_audit_directory_files(hostile_audit: Path):
    report = read_audit(hostile_audit)
    assert [b.id for b in report.biases] == ["position", "length", "authority-bias"]
    data = json.loads((hostile_audit / "audit.json").read_text())
    position = data["biases"][0]
    for key in ("z", "pb", "q_hat", "acc_both"):
        assert set(position[key]) >= {"value", "n", "ci_low", "ci_high"}
    rows = list(csv.DictReader((hostile_audit / "audit.csv").open()))
    z_rows = [r for r in rows if r["bias_id"] == "position" and r["metric"] == "z" and r["scope"] == "all"]
    # the item is the unit: 4 pairs, none left out
    assert [r["scheme"] for r in z_rows] == ["none", "swap"] and (z_rows[0]["n"], z_rows[0]["n_excluded"]) == ("4", "0")
    delta = next(
        r
        for r in rows
        if r["bias_id"] == "authority-bias"
        and r["metric"] == "delta_error"
        and r["scope"] == "all"
        and r["scheme"] == "none"
    )
    assert float(delta["value"]) == 1.0 and float(delta["p_value"]) == pytest.approx(0.5**4)
    assert {r["scope"] for r in rows} == {"all", "math", "code"}
    assert (hostile_audit / "judgments.jsonl").is_file() and (hostile_audit / "perturbed.jsonl").is_file()


def test_damaged_audit_json_is_named(hostile_audit: Path):
    (hostile_audit / "audit.json").write_text('{"version": 1, "kind": "audit"}')
    with pytest.raises(DataError, match=r"audit.json: not a valid AuditReport: model: Field required"):
        read_audit(hostile_audit)


def test_audit_report_escapes_model_text(hostile_audit: Path):
    html = render_audit(hostile_audit)
    assert "<script>alert" not in html and "<script>document" not in html and '<img src="x"' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for anchor in ('id="audit"', 'id="summary"', 'id="bias-position"', 'id="bias-length"', 'id="bias-authority-bias"'):
        assert anchor in html
    assert "Judge's explanation" in html and "<ins>" in html  # an example with the rewrite marked
    assert "position bias" in html  # the monitor's flag on the A-picking judge


def test_report_command_renders_an_audit_directory(hostile_audit: Path, tmp_path: Path):
    out = tmp_path / "audit.html"
    result = cli("report", str(hostile_audit), "--out", str(out))
    assert "wrote" in result.stdout and "Audit of fake/judge" in out.read_text()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)")
def test_audit_report_in_headless_chromium(hostile_audit: Path, tmp_path: Path):
    url = write_audit_report(hostile_audit, tmp_path / "audit.html").resolve().as_uri()
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", html, re.S).group(1)
    assert "<script" not in html and '<img src="x"' not in html
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in html
    assert "Audit of fake/judge" in html and "<ins>" in html


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)")
def test_audit_report_tables_fit_a_1300px_window(hostile_audit: Path, tmp_path: Path):
    layout, _ = layout_at(write_audit_report(hostile_audit, tmp_path / "audit.html"), 1300, tmp_path)
    assert layout["page"] <= layout["window"] == 1300 and layout["overflowing"] == [], layout


# ------------------------------------------------------------------------------------------
# The embedded model
# ------------------------------------------------------------------------------------------


@pytest.mark.model
def test_real_audit_of_the_embedded_model(tmp_path: Path, smollm2_gguf_path):
    """SmolLM2 as judge and teacher: position and length built-ins and one seed bias, with the
    swap mitigation, then the HTML report (in Chromium where it is installed)."""
    out = tmp_path / "audit"
    result = cli_in_process(
        "audit",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--limit",
        "4",
        "--biases",
        "position,length,authority-bias",
        "--teacher",
        "hf/smollm2",
        "--perturb-max-tokens",
        "200",
        "--repeats",
        "2",
        "--reasoning-chars",
        "200",
        "--max-tokens",
        "96",
        "--mitigation",
        "swap",
        "--n-boot",
        "500",
        "--out",
        str(out),
    )
    assert "Position (built-in)" in result.stdout and "z" in result.stdout and "p̂_cr" in result.stdout
    data = json.loads((out / "audit.json").read_text())
    position = next(b for b in data["biases"] if b["id"] == "position")
    # SmolLM2 picks A nearly always when it reasons first: nearly every item won by the first
    # position in both orders, a large PB. With the item as the unit, 4 items give at most
    # z = (4 - 1) / 2 = 1.5: too few to flag (the verdict-level z flagged 8 verdicts).
    assert position["z"]["n"] >= 3 and position["first_win_rate"]["value"] >= 0.75 and position["z"]["value"] >= 1.0
    assert position["position_flag"] is False and position["z"]["n"] + position["z"]["n_excluded"] == 4
    assert position["pb"]["value"] >= 0.5 and position["acc_both"]["n"] >= 3 and position["q_hat"]["value"] is not None
    # swap shows both orders and maps them back: no position bias is left, by construction
    assert position["mitigated"]["pb"]["value"] == 0.0 and position["mitigated"]["calls_per_verdict"] == 2
    seed_bias = next(b for b in data["biases"] if b["id"] == "authority-bias")
    assert seed_bias["n_items"] + seed_bias["n_perturb_invalid"] == 4
    assert data["teacher"] == "hf/smollm2" and data["calls"]["teacher"] == 4
    cli_in_process("report", str(out))
    html = (out / "report.html").read_text()
    assert 'id="bias-authority-bias"' in html and "hf/smollm2" in html
    if CHROMIUM.exists():
        dom = _chromium("--dump-dom", (out / "report.html").resolve().as_uri(), user_data=tmp_path / "profile")
        assert dom.returncode == 0 and "Authority Bias" in dom.stdout
