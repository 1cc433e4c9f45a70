"""Judge throughput: the judge pipeline vs the same requests sent straight into the engine.

Both sides use one engine instance (no call cache), the same requests (built once by the
pipeline's own request builder) and alternate over several rounds, so the ratio compares
like with like in one run. The pipeline adds prompt rendering, verdict parsing and scoring.

    python benchmarks/judge_throughput.py [--model llamacpp/smollm2] [--pairs 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from bias_discovery.data.loaders import load_pairs
from bias_discovery.judging import JudgeSettings, build_tasks, judge_pairs
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.registry import make_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llamacpp/smollm2")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=200, max_tokens=96)
    pairs = load_pairs("demo", limit=args.pairs)
    config = ModelConfig.from_spec(args.model, **({"base_url": args.base_url} if args.base_url else {}))
    engine = make_engine(config)  # no cache: both sides must really generate
    requests = [t.request for t in build_tasks(pairs, settings, seed=42)]
    engine.generate(requests[:1])  # warm-up: model load and first grammar compile

    totals = {"direct": [0.0, 0], "pipeline": [0.0, 0]}
    for _ in range(args.rounds):
        start = time.perf_counter()
        responses = engine.generate(requests)
        totals["direct"][0] += time.perf_counter() - start
        totals["direct"][1] += sum(r.completion_tokens for r in responses)

        start = time.perf_counter()
        result = judge_pairs(engine, pairs, settings, seed=42)
        totals["pipeline"][0] += time.perf_counter() - start
        totals["pipeline"][1] += sum(j.completion_tokens for j in result.judgments)
    engine.close()

    rate = {k: tokens / seconds for k, (seconds, tokens) in totals.items()}
    print(f"model {config.spec}, {len(requests)} requests x {args.rounds} rounds")
    for k, (seconds, tokens) in totals.items():
        print(f"  {k:9s} {tokens:6d} completion tokens in {seconds:7.2f} s = {rate[k]:7.1f} tokens/s")
    print(f"ratio pipeline/direct: {rate['pipeline'] / rate['direct']:.3f}  (goal >= 0.95)")


if __name__ == "__main__":
    main()
