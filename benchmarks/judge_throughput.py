"""Judge throughput: the judge pipeline vs the same requests sent straight into the engine.

Both sides use one engine instance (no call cache), the same requests (built once by the
pipeline's own request builder) and alternate over several rounds, so the ratio compares
like with like in one run. The pipeline adds prompt rendering, verdict parsing and scoring
(and, on vLLM, enqueuing each request on its own and stepping the engine so that every
response is reported as vLLM finishes it).

- `--engine ours` (default): "direct" is our engine's `generate` on the built requests.
- `--engine vllm`: "direct" is vLLM's own `LLM.chat` on the same conversations, with
  `SamplingParams`/`StructuredOutputsParams` built straight from vLLM (no code of ours between
  the requests and vLLM); the pipeline runs our `vllm/` engine around the same `LLM`. The
  model defaults to the Hugging Face-format SmolLM2 (`python -m bias_discovery.smollm2_hf`).

    python benchmarks/judge_throughput.py [--model llamacpp/smollm2] [--pairs 8] [--rounds 2]
    python benchmarks/judge_throughput.py --engine vllm [--model vllm/DIR] [--pairs 24] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from provenance import Provenance

from bias_discovery.data.loaders import load_pairs
from bias_discovery.judging import JudgeSettings, build_tasks, judge_pairs
from bias_discovery.llm.base import message_dicts
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import GenerationRequest


def plain_vllm_chat(llm: Any) -> Callable[[Sequence[GenerationRequest]], int]:
    """What a user of vLLM alone would write: `LLM.chat` with vLLM's own parameter classes.
    Returns the completion tokens generated."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    def run(requests: Sequence[GenerationRequest]) -> int:
        params = []
        for r in requests:
            c = r.constraint
            structured = None
            if c is not None:
                structured = StructuredOutputsParams(
                    choice=list(c.choices) if c.choices else None, regex=c.regex, json=c.json_schema
                )
            params.append(
                SamplingParams(
                    temperature=r.temperature,
                    top_p=r.top_p,
                    max_tokens=r.max_tokens,
                    seed=r.seed,
                    structured_outputs=structured,
                )
            )
        outputs = llm.chat([message_dicts(r.messages) for r in requests], sampling_params=params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine",
        choices=("ours", "vllm"),
        default="ours",
        help="what the pipeline is compared with (see the module docstring)",
    )
    parser.add_argument("--model", default=None, help="default: llamacpp/smollm2, or the HF SmolLM2 with --engine vllm")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    Provenance.start(print_at_exit=True)

    model = args.model
    if model is None and args.engine == "vllm":
        from bias_discovery.smollm2_hf import build_hf_smollm2

        model = f"vllm/{build_hf_smollm2()}"
    config = ModelConfig.from_spec(
        model or "llamacpp/smollm2", **({"base_url": args.base_url} if args.base_url else {})
    )
    if args.engine == "vllm" and config.provider != "vllm":
        parser.error("--engine vllm needs a vllm/ model")

    settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=200, max_tokens=96)
    pairs = load_pairs("demo", limit=args.pairs)
    engine = make_engine(config)  # no cache: both sides must really generate
    requests = [t.request for t in build_tasks(pairs, settings, seed=42)]

    if args.engine == "vllm":
        direct_run = plain_vllm_chat(engine.llm)  # type: ignore[attr-defined]
        direct_label = "LLM.chat"
    else:

        def direct_run(batch: Sequence[GenerationRequest]) -> int:
            return sum(r.completion_tokens for r in engine.generate(batch))

        direct_label = "engine"

    def pipeline_run() -> int:
        result = judge_pairs(engine, pairs, settings, seed=42)
        return sum(j.completion_tokens for j in result.judgments)

    direct_run(requests[:2])  # warm-up: model load, first grammar compile
    pipeline_run()

    rounds: list[dict[str, tuple[float, int]]] = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        direct_tokens = direct_run(requests)
        direct = (time.perf_counter() - start, direct_tokens)
        start = time.perf_counter()
        pipeline_tokens = pipeline_run()
        rounds.append({"direct": direct, "pipeline": (time.perf_counter() - start, pipeline_tokens)})
    engine.close()

    print(
        f"model {config.spec}, {len(requests)} judge requests ({len(pairs)} demo pairs, both orders) "
        f"x {args.rounds} rounds, alternating; direct = {direct_label}"
    )
    totals = {k: (sum(r[k][0] for r in rounds), sum(r[k][1] for r in rounds)) for k in ("direct", "pipeline")}
    rate = {k: tokens / seconds for k, (seconds, tokens) in totals.items()}
    for k, (seconds, tokens) in totals.items():
        print(f"  {k:9s} {tokens:6d} completion tokens in {seconds:7.2f} s = {rate[k]:7.1f} tokens/s")
    per_round = [(r["pipeline"][1] / r["pipeline"][0]) / (r["direct"][1] / r["direct"][0]) for r in rounds]
    spread = f", per round {min(per_round):.3f}-{max(per_round):.3f}" if len(per_round) > 1 else ""
    print(
        f"ratio pipeline/direct: {rate['pipeline'] / rate['direct']:.3f} "
        f"(n={len(per_round)} rounds{spread}; goal >= 0.95)"
    )
    if len(per_round) > 1:
        print(f"  per-round ratios: {', '.join(f'{x:.3f}' for x in per_round)} (sd {statistics.stdev(per_round):.3f})")


if __name__ == "__main__":  # vLLM starts its workers with spawn
    main()
