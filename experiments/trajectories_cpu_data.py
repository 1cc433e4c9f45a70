"""The data of `experiments/trajectories-cpu.yaml`: the shortest τ-bench trajectory pairs that
fit the embedded model's context, split into target and test pairs.

    python experiments/trajectories_cpu_data.py --data-dir ../shared/data [--out runs/trajectories-cpu-data]

τ-bench (Yao et al., 2024; sierra-research/tau-bench, MIT) is read from your local copy
(`taubench/gpt-4o-airline.json` under `--data-dir`, as `--data taubench` reads it) and never
shipped. Its 26 pairs (a completed against a failed trial of one task) are measured as the
judge reads one (the policy once, the task and both transcripts) in SmolLM2's own tokens; the
pairs whose judge prompt leaves room for the judge's reply within SmolLM2's context window
(8,192 tokens) are ordered shortest first, the first `--target` become the target pairs and the
next `--test` the test pairs (disjoint, as the loop requires). Each is written as a JSONL row
whose `chosen` and `rejected` are the trajectories' message lists (the loader's OpenAI-style
trajectory format), with the τ-bench attribution in `README.md` beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bias_discovery.data.loaders import load_pairs
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.data.trajectory import Trajectory, render_transcript
from bias_discovery.smollm2_hf import build_hf_smollm2

CONTEXT = 8192
"""SmolLM2-135M-Instruct's context window, in tokens."""
HEADROOM = 768
"""Tokens left for the judge prompt's own words and the longest reply the config asks for."""

ATTRIBUTION = """τ-bench (Yao et al., 2024, "τ-bench: a benchmark for tool-agent-user interaction in
real-world domains"), sierra-research/tau-bench, `historical_trajectories/`: GPT-4o's airline
trajectories, under the MIT License (the repository's LICENSE file holds its notice). Written
by experiments/trajectories_cpu_data.py from a local copy; not part of bias-discovery.
"""


def prompt_tokens(pair: PreferencePair, count: object) -> int:
    """Tokens of what a pairwise judge reads of `pair`: the policy once, the task, both transcripts."""
    chosen, rejected = Trajectory.from_response(pair.chosen), Trajectory.from_response(pair.rejected)
    text = "\n\n".join([chosen.policy, pair.question, render_transcript(chosen), render_transcript(rejected)])
    return int(count(text))  # type: ignore[operator]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, type=Path, help="the folder holding taubench/")
    parser.add_argument("--out", type=Path, default=Path("runs/trajectories-cpu-data"))
    parser.add_argument("--target", type=int, default=2, help="target pairs (discovery)")
    parser.add_argument("--test", type=int, default=4, help="test pairs (validation)")
    args = parser.parse_args(argv)

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(build_hf_smollm2() / "tokenizer.json"))
    pairs = load_pairs("taubench", data_dir=args.data_dir)
    sized = sorted(((prompt_tokens(p, lambda t: len(tokenizer.encode(t).ids)), p) for p in pairs), key=lambda x: x[0])
    fitting = [(n, p) for n, p in sized if n + HEADROOM <= CONTEXT]
    wanted = args.target + args.test
    if len(fitting) < wanted:
        print(
            f"only {len(fitting)} of {len(pairs)} τ-bench pairs fit {CONTEXT} tokens; {wanted} asked", file=sys.stderr
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, chosen in (("target", fitting[: args.target]), ("test", fitting[args.target : wanted])):
        with (args.out / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            for _, pair in chosen:
                row = {
                    "id": pair.id,
                    "question": pair.question,
                    "chosen": json.loads(pair.chosen),
                    "rejected": json.loads(pair.rejected),
                    "domain": pair.domain,
                    "source": pair.source,
                }
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        sizes = ", ".join(f"{p.id} {n} tokens" for n, p in chosen)
        print(f"{name}: {len(chosen)} pairs ({sizes}) -> {args.out / (name + '.jsonl')}")
    (args.out / "README.md").write_text(ATTRIBUTION, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
