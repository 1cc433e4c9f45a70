"""Where the two sides' outputs differ, and why: the procedure (different requests, parsing,
rules) or the model's sampling (the same request answered differently). The texts quote the
run's own figures."""

from __future__ import annotations

from .compare import Difference, SideSummary, pct
from .metering import StageCost


def _reading_and_requests(peer: SideSummary, ours: SideSummary) -> list[Difference]:
    """The differences in what each side asks, reads and shows the judge (with the run's counts)."""
    pf, of = peer.findings, ours.findings
    return [
        Difference(
            cause="procedure",
            what=(
                f"Reading the verdict: the peer searches the judge's free text for 'Decision: <digit>' and drops what "
                f"does not match; ours constrains the output to 'Reasoning: ... Verdict: A|B' while it is generated. "
                f"Readable verdicts on the perturbed target pairs: peer {pct(pf.judge_valid_rate)}, ours {pct(of.judge_valid_rate)}. "
                "Every later difference in what is found follows from this one where the peer reads none."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Prompts: each side uses its own wording for the rewrite, the judge, the explanation, the detection and "
                "the merge (ours are not copies), so even greedy decoding of the same model gives different texts: "
                "the rewrites, verdicts and named biases differ because the requests differ, not because of sampling."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Invalid rewrites: the peer judges every rewrite, also one cut off by the token budget or identical to "
                "the original; ours judges only valid rewrites (the rest are counted, not judged): evaluate calls "
                f"peer {peer.stages.get('evaluate', StageCost()).calls}, ours {ours.stages.get('evaluate', StageCost()).calls} "
                f"for {peer.stages.get('perturb', StageCost()).calls} rewrites each."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Order shown to the judge: the peer's target file has the chosen response first on every row (its "
                "RewardBench parquet has label 1 throughout) and its stage 1 never swaps, so a judge that always picks "
                "the first answer is never wrong there; ours with the paper's rule keeps that order (judge.positions: fixed), "
                "our defaults swap it with a seeded coin per pair. The peer's stage 2 shuffles A/B for each bias but not "
                "for its baseline; ours compares the same items in the same order."
            ),
        ),
    ]


def _rules(peer: SideSummary, ours: SideSummary) -> list[Difference]:
    """The differences in detection, merge, validation and engine loads."""
    return [
        Difference(
            cause="procedure",
            what=(
                "Detection: the peer asks for a ```json block in free text and takes a bias only when it parses with a "
                "definition; ours constrains the answer to a JSON schema (name, definition, manifestations) or 'none'."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Merge: the peer asks the teacher about each new name against each library entry, one call at a time, "
                "until one says 'Decision: 0'; ours shortlists the nearest library entries and candidates by embedding "
                "similarity and asks a constrained same/new only about those, in one batch."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                "Validation: the peer keeps a bias when its error on its rewrites of the test pairs exceeds the error on "
                "the originals, each over the verdicts it could parse (1.0 when it can parse none); ours with the "
                "paper's rule applies the same rule to the items valid in both arms; our defaults test against a neutral "
                "rewrite of the same items (placebo) with McNemar's exact test, Holm's correction, sequential looks and "
                "an answer check. The peer recomputes its baseline in every stage-2 process; ours once per run."
            ),
        ),
        Difference(
            cause="procedure",
            what=(
                f"Engine loads: the peer loads a vllm.LLM for each role in each step (teacher, judge, teacher; teacher, "
                f"judge in stage 2): {peer.engine_loads:g} per run here; ours loads one engine for both roles: "
                f"{ours.engine_loads:g}."
            ),
        ),
    ]


def differences(peer: SideSummary, ours: SideSummary, defaults: SideSummary) -> list[Difference]:
    """Where the outputs differ, and why: the procedure (different requests, parsing, rules) or
    the model's sampling (the same request answered differently)."""
    out = [*_reading_and_requests(peer, ours), *_rules(peer, ours)]
    for name, side in (("peer", peer), ("ours (paper rule)", ours), ("ours (defaults)", defaults)):
        if len(side.runs) > 1:
            out.append(
                Difference(
                    cause="sampling",
                    what=(
                        f"{name}: its repetitions found, merged and kept "
                        + (
                            "the same (greedy decoding repeated itself on this machine)"
                            if side.same_findings_every_rep
                            else "different things (greedy decoding did not repeat itself: batch composition changes the floating-point sums)"
                        )
                    ),
                )
            )
    out.append(
        Difference(
            cause="sampling",
            what=(
                "Both sides decode greedily (temperature 0, no top-k/top-p, repetition penalty 1) on the same weights and "
                "engine with the same budget, so no difference above comes from random sampling; what remains is numerical: "
                "the same prompt in a batch of another size can give another greedy text on a CPU."
            ),
        )
    )
    return out
