"""LLM calls of validation and of the loop, side by side with what a reference would have spent.

Two modes, each printing ratios measured in one run:

    python benchmarks/loop_calls.py RUN_DIR [--full-test-size 620]
    python benchmarks/loop_calls.py --simulate [--items 620] [--iterations 4] [--candidates 6] [--runs 3]

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
Stages that are the same in both (perturb, evaluate, explain, identify) count the same.
Cache hits are shown separately: they cost nothing.

**--simulate**: a simulated judge and teacher (no model): every iteration validates
`--candidates` candidates (one strongly biased, one moderately, the rest null) on `--items`
test items, with sequential looks (the default settings: `effect: held_out`, whose held-out
round judges a candidate accepted early on the rest of the items too), with sequential looks
and `effect: conditional` (no held-out round), and once on every item, with the same placebo
and baseline, and prints the calls of each, their ratios to every item, and whether the
accepted sets are the same; the paper's reference procedure is priced on the same candidates.
"""

from __future__ import annotations

import argparse
import hashlib
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
    for t in rd.iterations():
        record = rd.iteration(t)
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

    reference = {"merge": ref_merge, "validate": ref_validate, "validate_seeds": ref_seeds, "baseline": ref_baseline, "placebo": 0}
    print(f"run {rd.root}: {len(rd.iterations())} iteration folders; run's test items: {run_test}; reference priced on {full_test}")
    print(f"{'stage':15s} {'requests':>9s} {'cached':>7s} {'prompt tok':>11s} {'compl tok':>10s} {'reference':>10s} {'ratio':>7s}")
    total_ours = total_ref = 0
    for stage in ("perturb", "evaluate", "deeper_explain", "identify", "merge", "baseline", "placebo", "validate_seeds", "validate"):
        row = ours.get(stage, {})
        n = row.get("requests", 0)
        ref = reference.get(stage, n)
        total_ours += n
        total_ref += ref
        ratio = f"{n / ref:.3f}" if ref else "-"
        print(f"{stage:15s} {n:9d} {row.get('cached', 0):7d} {row.get('prompt_tokens', 0):11d} {row.get('completion_tokens', 0):10d} {ref:10d} {ratio:>7s}")
    print(f"{'all':15s} {total_ours:9d} {'':7s} {'':11s} {'':10s} {total_ref:10d} {total_ours / total_ref if total_ref else 0:7.3f}")
    print("ratio = our calls / reference calls (lower is cheaper); placebo and answer checks have no reference counterpart")
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
        return GenerationResponse(text=self._respond(request), finish_reason="stop", prompt_tokens=100, completion_tokens=20)

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
        PreferencePair(id=f"s{i}", question=f"Question {i}?", chosen=f"RIGHT answer, item {i}.",
                       rejected=f"Wrong answer, item {i}.", domain=("math", "code", "knowledge", "reasoning")[i % 4])
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
        placebo = run_placebo(world, world, world, pairs, baseline, perturb_settings=perturb, judge_settings=judge,
                              settings=settings, seed=seed)
        accepted = []
        setup = ValidationSetup(
            family=FamilySettings(rules=settings, family_alpha=settings.alpha, seed=seed), perturb=perturb, judge=judge, test_data="simulated"
        )
        for family in families:
            out = validate_biases(ValidationModels(world, world, world), family, pairs, baseline, setup, placebo=placebo)
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
    print("sequential: the default settings (effect: held_out, with its held-out round); conditional: effect: conditional")
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
        print(f"{run:4d} {seq['total']:11d} {cond['total']:12d} {full['total']:11d} {ratios['sequential'][-1]:7.3f} "
              f"{ratios['sequential, conditional'][-1]:7.3f} {paper['total']:10d} {paper_ratio:7.3f}  "
              f"{'yes' if equal else 'NO':>17s}   {accepted} of {iterations * n_candidates}")
        if run == 0:
            for mode in MODES:
                print(f"     calls by kind, {mode}: {r[mode]['calls']}")
    for mode, values in ratios.items():
        print(f"mean ratio {mode} / every item: {statistics.mean(values):.3f} (min {min(values):.3f}, max {max(values):.3f})")
    print(f"sequential / paper reference: {statistics.mean(paper_ratios):.3f}; same accepted set in {same} of {runs} runs")
    print("both validations include the placebo arm (once per run) and one answer check per rewrite; the paper's")
    print("reference has neither (and re-judges the baseline every iteration)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--full-test-size", type=int, default=None, help="price the reference on N test items (default: the run's own)")
    parser.add_argument("--simulate", action="store_true", help="a simulated judge instead of a run directory")
    parser.add_argument("--items", type=int, default=620, help="simulated test items (JudgeBench: 620)")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=6, help="candidates per iteration (at least 2)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    Provenance.start(print_at_exit=True)
    if args.simulate:
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
