"""Server throughput: the `openai/` engine vs a bare concurrent client, same requests, one run.

Both sides send the same request bodies (built once by the engine's own `build_payload`: judge
requests with the verdict constraint) to the same server with the same number in flight; the
bare side is httpx plus a thread pool and nothing else. The engine adds its replica choice,
retries, per-response reporting and the check of every reply against its constraint. Rounds
alternate which side goes first (a server's prefix cache helps whoever comes second), and
the ratio is engine tokens/s over bare tokens/s (goal >= 0.95).

    python benchmarks/server_throughput.py --base-url http://127.0.0.1:8000/v1 --model smollm2
    python benchmarks/server_throughput.py --serve DIR   # starts vLLM on DIR with scripts/serve_vllm.sh
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean, stdev
from typing import Any

from provenance import Provenance

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]


def serve(model_dir: str, port: int, log_dir: Path) -> list[int]:
    """Start vLLM (CPU build here) through scripts/serve_vllm.sh; the process group ids."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
        "SERVE": "teacher",
        "TEACHER": model_dir,
        "TEACHER_NAME": "smollm2",
        "TEACHER_PORT": str(port),
        "MAX_LEN": "2048",
        "LOG_DIR": str(log_dir),
    }
    subprocess.run([str(REPO / "scripts/serve_vllm.sh")], cwd=REPO, env=env, check=True)
    return [int(p) for p in (log_dir / "pids").read_text().split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--model", default="smollm2", help="served model name")
    parser.add_argument("--serve", default=None, metavar="DIR", help="start a vLLM server on this model directory")
    parser.add_argument("--pairs", type=int, default=16, help="demo pairs; each is judged in both orders")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--concurrency", type=int, default=None, help="in flight (default: the engine's for the dialect)"
    )
    args = parser.parse_args()
    Provenance.start(print_at_exit=True)

    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks
    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.openai import OpenAIServerEngine, build_payload

    pids: list[int] = []
    base_url = args.base_url
    if args.serve:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        pids = serve(args.serve, port, Path(tempfile.mkdtemp(prefix="server-throughput-")))
        base_url = f"http://127.0.0.1:{port}/v1"
    if not base_url:
        parser.error("give --base-url or --serve")
    try:
        import httpx

        settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=200, max_tokens=96)
        pairs = load_pairs("demo", limit=args.pairs, seed=42)
        requests = [t.request for t in build_tasks(pairs, settings, seed=42)]
        config = ModelConfig.from_spec(f"openai/{args.model}", base_url=base_url, max_concurrency=args.concurrency)
        engine = OpenAIServerEngine(config)
        engine.generate(requests[:1])  # warm-up: dialect, the probe of the verdict constraint, first grammar
        dialect = engine.dialect
        bodies = [build_payload(args.model, r, dialect) for r in requests]
        workers = min(engine.max_concurrency, len(bodies))
        client = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))

        def bare_one(body: dict[str, Any]) -> int:
            reply = client.post(f"{base_url}/chat/completions", json=body)
            reply.raise_for_status()
            return int(reply.json()["usage"]["completion_tokens"])

        def bare() -> tuple[float, int]:
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                tokens = sum(pool.map(bare_one, bodies))
            return time.perf_counter() - start, tokens

        def ours() -> tuple[float, int]:
            start = time.perf_counter()
            responses = engine.generate(requests)
            return time.perf_counter() - start, sum(r.completion_tokens for r in responses)

        bare()  # warm-up of the bare side too
        rates: dict[str, list[float]] = {"bare client": [], "openai engine": []}
        totals = {k: [0.0, 0] for k in rates}
        for round_ in range(args.rounds):
            order = [("bare client", bare), ("openai engine", ours)]
            for name, run in order if round_ % 2 == 0 else order[::-1]:
                seconds, tokens = run()
                rates[name].append(tokens / seconds)
                totals[name][0] += seconds
                totals[name][1] += tokens
        engine.close()
        client.close()

        print(
            f"server {base_url} ({dialect}), model {args.model}: {len(requests)} judge requests "
            f"(reasoning + verdict regex, max_tokens {settings.max_tokens}), {workers} in flight, "
            f"{args.rounds} rounds alternating which side goes first"
        )
        for name, (seconds, tokens) in totals.items():
            spread = f" ± {stdev(rates[name]):.1f} (sd over rounds)" if len(rates[name]) > 1 else ""
            print(
                f"  {name:14s} {tokens:6d} completion tokens in {seconds:7.2f} s = {tokens / seconds:7.1f} tokens/s"
                f"  (per round {mean(rates[name]):.1f}{spread})"
            )
        ratio = (totals["openai engine"][1] / totals["openai engine"][0]) / (
            totals["bare client"][1] / totals["bare client"][0]
        )
        per_round = [o / b for o, b in zip(rates["openai engine"], rates["bare client"])]
        print(
            f"ratio engine/bare: {ratio:.3f} (per round: {', '.join(f'{r:.3f}' for r in per_round)}; n={args.rounds}; "
            "goal >= 0.95)"
        )
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    main()
