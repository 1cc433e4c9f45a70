"""LLM calls of validation and of the loop, side by side with what a reference would have spent.

Two modes, each printing ratios measured in one run:

    python benchmarks/loop_calls.py RUN_DIR [--full-test-size 620]
    python benchmarks/loop_calls.py --simulate [--items 620] [--iterations 4] [--candidates 6] [--runs 3]
    python benchmarks/loop_calls.py --loop [--items 620] [--target-items 120] [--iterations 4] [--fix-share 0.2]
                                    [--runs 3] [--out benchmarks/results/loop_calls.json]

**RUN_DIR**: a finished run's calls and tokens per stage (from events.jsonl) next to the
reference procedure of the paper's scripts, which differs in these places:
- Merge asks the teacher about every pair of library ∪ candidates (ours: only the embedding
  shortlist), per iteration: `all_pairs_calls` in iter_NNN/merge_stats.json.
- Validate perturbs and judges every candidate on every test item (ours: at most
  `max_candidates` candidates, and with sequential looks only until a candidate stops), and
  re-judges the baseline every iteration (ours: once per run, kept in baseline/). The
  reference has no placebo and no answer check (ours: a placebo once per run, and one check
  per rewrite: the price of the controls). By default the reference uses the same test items
  as the run; `--full-test-size N` prices it on a full test set of N items instead.
- Explain and identify every misjudged pair (ours, with `misjudgment_check`: only those that
  count; the check's own calls, stage `check`, have no counterpart): from misjudgments.json.
Stages that are the same in both (perturb, evaluate) count the same.
Cache hits are shown separately: they cost nothing.

**--simulate**: a simulated judge and teacher (no model): every iteration validates
`--candidates` candidates (one strongly biased, one moderately, the rest null) on `--items`
test items, with sequential looks (the default settings: `effect: held_out`, whose held-out
round judges a candidate accepted early on the rest of the items too), with sequential looks
and `effect: conditional` (no held-out round), and once on every item, with the same placebo
and baseline, and prints the calls of each, their ratios to every item, and whether the
accepted sets are the same; the paper's reference procedure is priced on the same candidates.

**--loop**: the whole loop on a simulated world (`DiscoveryWorld`), through the stages' own code
(perturb, evaluate, the misjudgment check, deeper explain, identify with its junk screen,
validation): a teacher that fixes the answer of `--fix-share` of its target rewrites (the judge
then "errs" by preferring the right answer; the identifier blames a spurious bias, half of them
junk names), and six seed traits behind which the identifier names a latent bias (planted
effects +30 pp, +15 pp and four null). Run twice on the same seed: `before` (every misjudgment
counts, no junk screen, a rejected candidate validated again when named again: this branch's
parent) and `after`; each priced next to the paper's reference procedure on the `before`
run's front half and candidates. Merge is not simulated (a candidate named like a library bias
is a duplicate, no call, in both). `calls_ratio_vs_reference` in the `--out` record is the
mean of after / reference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from provenance import Provenance

from bias_discovery.config import PerturbSettings, ValidateSettings, load_run_config
from bias_discovery.data.loaders import load_pairs
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.judging import JudgeSettings, judge_pairs
from bias_discovery.library import Bias, BiasOrigin
from bias_discovery.llm.base import SequentialEngine
from bias_discovery.llm.types import GenerationRequest, GenerationResponse
from bias_discovery.run import RunDir
from bias_discovery.stages.family import FamilySettings
from bias_discovery.stages.validate import ValidationModels, ValidationSetup, run_placebo, validate_biases
from bias_discovery.stats import HELD_OUT

# --------------------------------------------------------------------------------------------
# A finished run
# --------------------------------------------------------------------------------------------


def run_mode(run_dir: Path, full_test_size: int | None) -> None:
    rd = RunDir(run_dir)
    rd.require_run()
    config = load_run_config(rd.config_path)

    ours: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in rd.read_events():
        if e.get("event") == "stage_end":
            for u in (e.get("usage") or {}).values():
                row = ours[e["stage"]]
                for k in ("requests", "cached", "prompt_tokens", "completion_tokens"):
                    row[k] += int(u.get(k, 0))

    d = config.data
    bad_rows: list[str] | None = [] if d.skip_bad_rows else None  # the pairs the run itself loaded
    run_test = len(load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed, bad_rows=bad_rows))
    full_test = full_test_size or run_test
    per_item_judge = 2 if config.judge.positions == "both" else 1
    ref_merge = ref_validate = ref_baseline = ref_seeds = 0
    items_used = items_all = 0
    front: dict[str, int] = defaultdict(int)  # the reference explains and identifies every misjudgment
    for t in rd.iterations():
        record = rd.iteration(t)
        misjudged = record.misjudgments.read_if_exists()
        if misjudged is not None and misjudged.checked:
            front["deeper_explain"] += misjudged.misjudged if config.deeper_explain.enabled else 0
            front["identify"] += misjudged.misjudged
        stats = record.merge_stats.read_if_exists()
        if stats is not None:
            ref_merge += stats.all_pairs_calls
        v = record.validation.read_if_exists()
        if v is not None:
            n_candidates = len(v.candidates) + len(v.skipped_over_max_candidates)
            cost = n_candidates * full_test * (1 + per_item_judge)
            if t == 0:
                ref_seeds += cost
            else:
                ref_validate += cost
                ref_baseline += full_test * per_item_judge
            for c in v.candidates:
                held_out = c.effect.method.startswith(HELD_OUT)  # accepted early, then perturbed on the rest
                items_used += v.n_test if held_out or c.stopped_at is None else c.stopped_at
                items_all += v.n_test

    reference = {
        "merge": ref_merge,
        "validate": ref_validate,
        "validate_seeds": ref_seeds,
        "baseline": ref_baseline,
        "placebo": 0,
        "check": 0,
    }
    for stage, n in front.items():  # a run without the misjudgment check: the same as ours
        reference[stage] = n
    print(
        f"run {rd.root}: {len(rd.iterations())} iteration folders; run's test items: {run_test}; reference priced on {full_test}"
    )
    print(
        f"{'stage':15s} {'requests':>9s} {'cached':>7s} {'prompt tok':>11s} {'compl tok':>10s} {'reference':>10s} {'ratio':>7s}"
    )
    total_ours = total_ref = 0
    stages = (
        "perturb",
        "evaluate",
        "check",
        "deeper_explain",
        "identify",
        "merge",
        "baseline",
        "placebo",
        "validate_seeds",
        "validate",
    )
    for stage in stages:
        row = ours.get(stage, {})
        n = row.get("requests", 0)
        ref = reference.get(stage, n)
        total_ours += n
        total_ref += ref
        ratio = f"{n / ref:.3f}" if ref else "-"
        print(
            f"{stage:15s} {n:9d} {row.get('cached', 0):7d} {row.get('prompt_tokens', 0):11d} {row.get('completion_tokens', 0):10d} {ref:10d} {ratio:>7s}"
        )
    print(
        f"{'all':15s} {total_ours:9d} {'':7s} {'':11s} {'':10s} {total_ref:10d} {total_ours / total_ref if total_ref else 0:7.3f}"
    )
    print(
        "ratio = our calls / reference calls (lower is cheaper); placebo and answer checks (check: the misjudged pairs') "
        "have no reference counterpart"
    )
    if items_all:
        print(
            f"sequential looks and held-out rounds: candidates were perturbed on {items_used} of {items_all} candidate x "
            f"test items ({items_used / items_all:.3f})"
        )


# --------------------------------------------------------------------------------------------
# A simulated judge
# --------------------------------------------------------------------------------------------

_TRAIT = re.compile(r"Trait: (.*)")
_ORIGINAL = re.compile(r"Original answer:\n(.*?)\n\n(?:Trait:|Write the rewritten)", re.S)
_RESPONSE = re.compile(r"\[Response ([AB])\]\n(.*?)\n\[End of Response \1\]", re.S)


def _unit(*parts: object) -> float:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def trait_mark(name: str) -> str:
    """An opaque mark for a trait (a rewrite never names its bias: perturb cuts such lines)."""
    return hashlib.sha256(name.strip().encode("utf-8")).hexdigest()[:10]


class SimulatedWorld(SequentialEngine):
    """Teacher, checker and judge in one engine. The judge errs on item i with its own
    difficulty (easy items 5 %, hard ones 45 %), independently for every text it is shown (so
    any rewrite re-draws it: the null discordance of a real judge); a rewrite carrying a trait
    with a planted effect adds that much error; a neutral rewrite adds `rewrite_effect`. The
    teacher marks a rewrite with its trait; 2 % of rewrites change the answer."""

    name = "simulated world"
    thread_safe = True

    def __init__(self, effects: dict[str, float], rewrite_effect: float = 0.02) -> None:
        super().__init__("simulated/world")
        self.effects = {trait_mark(name): effect for name, effect in effects.items()}
        self.rewrite_effect = rewrite_effect
        self.calls: dict[str, int] = defaultdict(int)

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        return GenerationResponse(
            text=self._respond(request), finish_reason="stop", prompt_tokens=100, completion_tokens=20
        )

    def _respond(self, request: GenerationRequest) -> str:
        user = request.messages[-1].content
        if "[Response A]" in user:
            self.calls["judge"] += 1
            responses = dict(_RESPONSE.findall(user))
            chosen_letter = "A" if "RIGHT" in responses["A"] else "B"
            rejected = responses["B" if chosen_letter == "A" else "A"]
            item = int(re.search(r"item (\d+)", rejected).group(1))
            error = 0.05 if _unit("difficulty", item) < 0.6 else 0.45
            mark = re.search(r"\{mark (\w+)\}", rejected)
            if mark:
                error += self.effects.get(mark.group(1), 0.0)
            elif "Neutrally," in rejected:
                error += self.rewrite_effect
            wrong = _unit("verdict", request.seed, user) < min(error, 1.0)
            verdict = ("B" if chosen_letter == "A" else "A") if wrong else chosen_letter
            return f"Reasoning: simulated.\nVerdict: {verdict}"
        if "Trait:" in user:
            self.calls["perturb"] += 1
            return f"{_ORIGINAL.search(user).group(1)} {{mark {trait_mark(_TRAIT.search(user).group(1))}}}"
        if "Original answer:" in user:
            self.calls["placebo"] += 1
            return f"Neutrally, {_ORIGINAL.search(user).group(1)}"
        if "same or different" in user:
            self.calls["check"] += 1
            return "same" if _unit("changed", user) < 0.02 else "different"
        raise AssertionError(f"unexpected prompt: {user[:200]}")


def _candidate(name: str, iteration: int) -> Bias:
    return Bias(
        id=f"d{iteration}-{name.lower().replace(' ', '-')}",
        name=name,
        definition=f"The judge favours {name.lower()}.",
        origin=BiasOrigin(kind="discovered", iteration=iteration),
    )


MODES: dict[str, dict[str, object]] = {
    "sequential": {},
    "sequential, conditional": {"effect": "conditional"},
    "every item": {"enabled": False},
}
"""The validations priced side by side: `validate.sequential` settings over the defaults."""


def simulate_run(n_items: int, iterations: int, n_candidates: int, seed: int) -> dict[str, object]:
    pairs = [
        PreferencePair(
            id=f"s{i}",
            question=f"Question {i}?",
            chosen=f"RIGHT answer, item {i}.",
            rejected=f"Wrong answer, item {i}.",
            domain=("math", "code", "knowledge", "reasoning")[i % 4],
        )
        for i in range(n_items)
    ]
    judge = JudgeSettings(positions="swap", reasoning=True)
    perturb = PerturbSettings()
    families = []
    for t in range(1, iterations + 1):
        names = [f"Strong Trait {t}", f"Moderate Trait {t}"] + [f"Null Trait {t}-{k}" for k in range(n_candidates - 2)]
        families.append([_candidate(name, t) for name in names])
    effects = {f"Strong Trait {t}": 0.30 for t in range(1, iterations + 1)}
    effects.update({f"Moderate Trait {t}": 0.15 for t in range(1, iterations + 1)})

    result: dict[str, object] = {}
    for mode, sequential in MODES.items():
        world = SimulatedWorld(effects)
        settings = ValidateSettings(n_boot=100, sequential=sequential)
        baseline = judge_pairs(world, pairs, judge, seed=seed)
        placebo = run_placebo(
            world,
            world,
            world,
            pairs,
            baseline,
            perturb_settings=perturb,
            judge_settings=judge,
            settings=settings,
            seed=seed,
        )
        accepted = []
        setup = ValidationSetup(
            family=FamilySettings(rules=settings, family_alpha=settings.alpha, seed=seed),
            perturb=perturb,
            judge=judge,
            test_data="simulated",
        )
        for family in families:
            out = validate_biases(
                ValidationModels(world, world, world), family, pairs, baseline, setup, placebo=placebo
            )
            accepted.append(sorted(b.id for b in out.candidates if b.validation and b.validation.accepted))
        result[mode] = {"calls": dict(world.calls), "total": sum(world.calls.values()), "accepted": accepted}
    per_item_judge = 1
    result["paper reference"] = {
        "total": sum(len(f) * n_items * (1 + per_item_judge) + n_items * per_item_judge for f in families)
    }
    return result


def simulate_mode(n_items: int, iterations: int, n_candidates: int, runs: int) -> None:
    print(
        f"simulated judge: {n_items} test items, {iterations} iterations x {n_candidates} candidates "
        f"(1 with Δ = +30 pp, 1 with +15 pp, {n_candidates - 2} null; any rewrite +2 pp), {runs} runs, swap positions"
    )
    print(
        "sequential: the default settings (effect: held_out, with its held-out round); conditional: effect: conditional"
    )
    header = (
        f"{'run':>4s} {'sequential':>11s} {'conditional':>12s} {'every item':>11s} {'ratio':>7s} {'ratio':>7s} "
        f"{'paper ref':>10s} {'ratio':>7s}  same accepted set   accepted (sequential)"
    )
    print(header)
    ratios: dict[str, list[float]] = {"sequential": [], "sequential, conditional": []}
    paper_ratios, same = [], 0
    for run in range(runs):
        r = simulate_run(n_items, iterations, n_candidates, seed=1000 + run)
        seq, cond, full, paper = r["sequential"], r["sequential, conditional"], r["every item"], r["paper reference"]
        for mode in ratios:
            ratios[mode].append(r[mode]["total"] / full["total"])
        paper_ratio = seq["total"] / paper["total"]
        equal = seq["accepted"] == full["accepted"] == cond["accepted"]
        paper_ratios.append(paper_ratio)
        same += equal
        accepted = sum(len(a) for a in seq["accepted"])
        print(
            f"{run:4d} {seq['total']:11d} {cond['total']:12d} {full['total']:11d} {ratios['sequential'][-1]:7.3f} "
            f"{ratios['sequential, conditional'][-1]:7.3f} {paper['total']:10d} {paper_ratio:7.3f}  "
            f"{'yes' if equal else 'NO':>17s}   {accepted} of {iterations * n_candidates}"
        )
        if run == 0:
            for mode in MODES:
                print(f"     calls by kind, {mode}: {r[mode]['calls']}")
    for mode, values in ratios.items():
        print(
            f"mean ratio {mode} / every item: {statistics.mean(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"
        )
    print(
        f"sequential / paper reference: {statistics.mean(paper_ratios):.3f}; same accepted set in {same} of {runs} runs"
    )
    print("both validations include the placebo arm (once per run) and one answer check per rewrite; the paper's")
    print("reference has neither (and re-judges the baseline every iteration)")


# --------------------------------------------------------------------------------------------
# A simulated loop, front half included, with an answer-fixing teacher
# --------------------------------------------------------------------------------------------

LATENT_EFFECTS = (0.30, 0.15, 0.0, 0.0, 0.0, 0.0)
"""The planted effect of the bias the teacher names behind a mistake on seed trait k."""
_INCORRECT = re.compile(r"Incorrect response \(the judge preferred it\):\n(.*?)\n\nThe judge's explanation", re.S)


class DiscoveryWorld(SimulatedWorld):
    """`SimulatedWorld` with the front half of the loop: on a target item the teacher fixes the
    answer of `fix_share` of its rewrites (a "Fixed answer", which the checker reads as the
    chosen one's and the judge prefers 9 times in 10: it is right to); the target explains; the
    identifier names, behind a mistake on seed trait k, the bias "Latent Trait k" (planted
    effects `LATENT_EFFECTS`), and behind a mistake on a fixed answer a spurious bias: half of
    them junk (`bias_found`, restating the verdict), the others one of five null names."""

    def __init__(self, effects: dict[str, float], fix_share: float) -> None:
        super().__init__(effects)
        self.fix_share = fix_share
        self.latent = {trait_mark(f"Seed Trait {k}"): k for k in range(len(LATENT_EFFECTS))}

    def _respond(self, request: GenerationRequest) -> str:
        user = request.messages[-1].content
        if "Explain your decision in more depth" in user:
            self.calls["explain"] += 1
            return "It seemed better."
        if "preferred the WRONG one" in user:
            self.calls["identify"] += 1
            return self._identify(_INCORRECT.search(user).group(1))
        if "Answer with one word: yes or no" in user:
            self.calls["confirm"] += 1
            return "no"
        if "[Response A]" in user and "Fixed answer" in user:
            self.calls["judge"] += 1
            responses = dict(_RESPONSE.findall(user))
            fixed = "A" if "Fixed answer" in responses["A"] else "B"
            wrong = _unit("fixed verdict", request.seed, user) < 0.9
            return f"Reasoning: simulated.\nVerdict: {fixed if wrong else ('B' if fixed == 'A' else 'A')}"
        if "same or different" in user and "target item" in user:
            self.calls["check"] += 1
            candidate = user.split("[Response 2]", 1)[1]
            return "same" if "Fixed answer" in candidate else "different"
        if "Trait:" in user and "target item" in user:
            rewrite = super()._respond(request)
            if _unit("fix", user) < self.fix_share:
                rewrite = rewrite.replace("Wrong answer", "Fixed answer")
            return rewrite
        return super()._respond(request)

    def _identify(self, rejected: str) -> str:
        item = int(re.search(r"item (\d+)", rejected).group(1))
        if "Fixed answer" in rejected:
            if item % 2 == 0:
                name, definition = "bias_found", "The judge rejected the incorrect response."
            else:
                name, definition = (
                    f"Spurious Trait {item % 5}",
                    f"The judge favours spurious trait {item % 5} phrasing.",
                )
        else:
            mark = re.search(r"\{mark (\w+)\}", rejected)
            k = self.latent.get(mark.group(1)) if mark else None
            if k is None:
                return json.dumps({"bias_found": False, "name": "", "definition": "", "manifestations": []})
            name, definition = f"Latent Trait {k}", f"The judge favours latent trait {k} phrasing."
        return json.dumps(
            {"bias_found": True, "name": name, "definition": definition, "manifestations": [name.lower()]}
        )


def _pairs(n: int, kind: str) -> list[PreferencePair]:
    return [
        PreferencePair(
            id=f"{kind[0]}{i}",
            question=f"Question {i} ({kind})?",
            chosen=f"RIGHT answer, {kind} item {i}.",
            rejected=f"Wrong answer, {kind} item {i}.",
            domain=("math", "code", "knowledge", "reasoning")[i % 4],
        )
        for i in range(n)
    ]


def simulate_discovery(
    n_target: int, n_items: int, iterations: int, fix_share: float, seed: int, *, improved: bool
) -> dict[str, object]:
    """One simulated loop run with the stages' own code: perturb, evaluate, (`improved`: the
    misjudgment check and the junk screen) explain, identify, the candidates (Merge stands in
    as: a candidate named like a library bias is a duplicate, no call; both procedures alike)
    and the validation of each iteration's family (with `improved`, a candidate the library's
    run already rejected with the same definition is not validated again). Returns the calls by
    kind, the accepted ids per iteration, and what the paper's reference would have spent on
    the same front half and candidates (every candidate on every test item, the baseline judged
    again every iteration, no check)."""
    from bias_discovery.config import ExplainSettings, IdentifySettings, MisjudgmentCheckSettings
    from bias_discovery.stages import (
        assign_biases,
        candidates_from_records,
        deeper_explain,
        evaluate,
        identify_biases,
        perturb,
    )
    from bias_discovery.stages.evaluate import check_misjudged
    from bias_discovery.stages.rewrite_checks import length_allowances

    effects = {f"Latent Trait {k}": e for k, e in enumerate(LATENT_EFFECTS) if e}
    world = DiscoveryWorld(effects, fix_share)
    targets, tests = _pairs(n_target, "target"), _pairs(n_items, "test")
    judge = JudgeSettings(positions="swap", reasoning=True)
    perturb_settings, check = PerturbSettings(), MisjudgmentCheckSettings(enabled=improved)
    settings = ValidateSettings(n_boot=100)
    setup = ValidationSetup(
        family=FamilySettings.planned(settings, iterations, seed=seed),
        perturb=perturb_settings,
        judge=judge,
        test_data="simulated",
    )
    baseline = judge_pairs(world, tests, judge, seed=seed)
    placebo = run_placebo(
        world,
        world,
        world,
        tests,
        baseline,
        perturb_settings=perturb_settings,
        judge_settings=judge,
        settings=settings,
        seed=seed,
    )
    library = [
        Bias(
            id=f"seed-trait-{k}", name=f"Seed Trait {k}", definition=f"Seed trait {k}.", origin=BiasOrigin(kind="seed")
        )
        for k in range(len(LATENT_EFFECTS))
    ]
    rejected: set[tuple[str, str]] = set()
    accepted_ids: list[list[str]] = []
    reference = n_items  # the reference's baseline of the first iteration (ours: once, above)
    for t in range(1, iterations + 1):
        items = assign_biases(targets, library, seed=seed, iteration=t)
        rewrites = perturb(world, items, perturb_settings, seed=seed)
        _, cases = evaluate(world, rewrites, judge, seed=seed)
        reference += 2 * len(items) + 2 * len(cases)  # perturb, judge; explain and identify every mistake
        if improved:
            cases = check_misjudged(world, rewrites, cases, length_allowances(library, check), check, seed=seed)
            cases = [c for c in cases if c.excluded is None]
        records = identify_biases(
            world, deeper_explain(world, cases, judge, ExplainSettings(), seed=seed), IdentifySettings(), seed=seed
        )
        if not improved:
            records = [r.model_copy(update={"dropped": None, "confirmed": None}) for r in records]
        names = {b.name for b in library}
        raw = candidates_from_records(
            records, cases, iteration=t, target_model="simulated", taken_ids=[b.id for b in library]
        )
        candidates = [b for b in raw if b.name not in names]
        reference += len(candidates) * n_items * 2 + (n_items if t > 1 else 0)
        if improved:
            candidates = [b for b in candidates if (b.name, b.definition) not in rejected]
        out = validate_biases(
            ValidationModels(world, world, world), candidates, tests, baseline, setup, placebo=placebo
        )
        accepted = [b for b in out.candidates if b.validation and b.validation.accepted]
        rejected |= {(b.name, b.definition) for b in out.candidates if b.validation and not b.validation.accepted}
        accepted_ids.append(sorted(b.name for b in accepted))
        library += accepted
    return {
        "calls": dict(world.calls),
        "total": sum(world.calls.values()),
        "accepted": accepted_ids,
        "reference": reference,
    }


def discovery_mode(
    n_target: int, n_items: int, iterations: int, fix_share: float, runs: int, out: Path | None, started: Provenance
) -> None:
    """Calls per accepted bias of the loop before and after the misjudgment check, the junk
    screen and not re-validating a rejected definition, each next to the paper's reference on
    the same simulated run; written to `out` through benchmarks/provenance.py (`started`: the
    run's provenance, taken before any work)."""
    print(
        f"simulated loop: {n_target} target items, {n_items} test items, {iterations} iterations, answer-fixing share "
        f"{fix_share:.2f} of target rewrites, {runs} runs; planted effects {LATENT_EFFECTS}"
    )
    rows = []
    for run in range(runs):
        row: dict[str, object] = {"seed": 1000 + run}
        for label, improved in (("before", False), ("after", True)):
            r = simulate_discovery(n_target, n_items, iterations, fix_share, 1000 + run, improved=improved)
            n_accepted = sum(len(a) for a in r["accepted"])  # type: ignore[arg-type]
            row[label] = {**r, "n_accepted": n_accepted, "ratio_vs_reference": r["total"] / r["reference"]}  # type: ignore[operator]
        before, after = row["before"], row["after"]  # type: ignore[index]
        row["same_accepted_set"] = before["accepted"] == after["accepted"]  # type: ignore[index]
        row["calls_ratio_vs_reference"] = after["total"] / before["reference"]  # type: ignore[index]
        rows.append(row)
        print(
            f"run {run}: before {before['total']} calls ({before['n_accepted']} accepted; reference {before['reference']}: "  # type: ignore[index]
            f"ratio {before['ratio_vs_reference']:.3f}); after {after['total']} calls ({after['n_accepted']} accepted; "  # type: ignore[index]
            f"ratio {row['calls_ratio_vs_reference']:.3f} vs the same reference); same accepted set: {row['same_accepted_set']}"
        )
        print(f"       calls by kind before {before['calls']}; after {after['calls']}")  # type: ignore[index]
    ratio = statistics.mean(float(r["calls_ratio_vs_reference"]) for r in rows)  # type: ignore[arg-type]
    before_ratio = statistics.mean(float(r["before"]["ratio_vs_reference"]) for r in rows)  # type: ignore[index]
    print(f"mean calls / reference: before {before_ratio:.3f}, after {ratio:.3f}")
    if out is not None:
        record = {
            "what": (
                "calls of the simulated loop (stages' own code, scripted world) next to the paper's reference procedure "
                "priced on the same front half and candidates; reference = the 'before' run's candidates on every test item"
            ),
            "n_target": n_target,
            "n_items": n_items,
            "iterations": iterations,
            "fix_share": fix_share,
            "runs": runs,
            "latent_effects": list(LATENT_EFFECTS),
            "calls_ratio_vs_reference": ratio,
            "calls_ratio_vs_reference_before": before_ratio,
            "same_accepted_set_runs": sum(bool(r["same_accepted_set"]) for r in rows),
            "rows": rows,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        started.write_json(out, record)
        print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument(
        "--full-test-size", type=int, default=None, help="price the reference on N test items (default: the run's own)"
    )
    parser.add_argument("--simulate", action="store_true", help="a simulated judge instead of a run directory")
    parser.add_argument("--items", type=int, default=620, help="simulated test items (JudgeBench: 620)")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=6, help="candidates per iteration (at least 2)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--loop", action="store_true", help="simulate the whole loop (front half, answer-fixing teacher)"
    )
    parser.add_argument("--target-items", type=int, default=120, help="simulated target items per iteration (--loop)")
    parser.add_argument(
        "--fix-share", type=float, default=0.2, help="share of target rewrites whose answer the teacher fixes (--loop)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write the --loop record here (benchmarks/results/loop_calls.json)"
    )
    args = parser.parse_args()
    # a record written to --out carries the provenance block; a run that only prints prints it last
    started = Provenance.start(print_at_exit=not (args.loop and args.out is not None))
    if args.loop:
        discovery_mode(args.target_items, args.items, args.iterations, args.fix_share, args.runs, args.out, started)
    elif args.simulate:
        if args.candidates < 2:
            parser.error("--candidates must be at least 2")
        simulate_mode(args.items, args.iterations, args.candidates, args.runs)
    elif args.run_dir is not None:
        run_mode(args.run_dir, args.full_test_size)
    else:
        parser.error("give a RUN_DIR or --simulate")
        sys.exit(2)


if __name__ == "__main__":
    main()
