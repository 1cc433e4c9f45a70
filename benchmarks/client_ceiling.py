"""Client ceiling: how many requests per second the `openai/` engine sustains, through the call
cache as the loop uses it, next to a bare aiohttp client, against a stub server that is never
the limit.

    python benchmarks/client_ceiling.py --json /tmp/client_ceiling.json
    python benchmarks/client_ceiling.py --inflight 256 2048 --latencies 0 --rounds 2 --with-httpx

For each latency (0 s: an instant server, so the client's own cost per request is the limit;
2 s: a GPU server's pace, so the question is whether the client keeps `inflight` requests
really in flight) the stub (tests/stub_openai.py) runs in a process of its own and answers
every chat completion after that latency with a reply that satisfies the request's
constraint. At each in-flight level the same request bodies (judge requests with the verdict
regex, built by the engine's own `build_payload`) are sent by

- **ours**: `ModelRoles` -> meter -> call cache -> the engine's replica choice, deadline,
  constraint probe and check of every reply, one per in-flight level, held across its runs
  as the loop holds it for a whole run;
- **bare**: one aiohttp session, a semaphore of `inflight`, `json=` bodies, the reply parsed;
- **bare httpx** (`--with-httpx`): the same with `httpx.AsyncClient`, to show why aiohttp;
- **submitted** (`--with-submit`): ours with every request submitted on its own and awaited,
  as the streamed stages ask (`pipeline: streamed`).

Every client is warmed up first with one wave (connections; ours' constraint probe, which a
run pays once per server), and every run sends requests with seeds no earlier run used, so
each is a cache miss that ours stores. The bare sides run on the same kind of event loop as
the engine (uvloop where installed).

Rounds alternate which side goes first. Per run: requests/s, CPU ms per request in this
process, the stub's peak in flight (counted by the stub) and req/s x latency, and the stub's
CPU as a share of one core over the run (it must stay well below 100 %). `errors` counts
requests that failed, came back invalid, or were sent more than once (the stub counts what
it answered). Writes `ratio_l0_2048`, `ratio_l2_2048` (ours / bare, req/s summed over rounds),
`inflight_l2_2048` (ours: req/s x latency) and `errors` to `--json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the stub server lives with the tests that use it too

from provenance import Provenance  # noqa: E402

from stub_openai import launch, stats  # noqa: E402

MODEL = "served"


def make_requests(n: int, first_seed: int = 0) -> list[Any]:
    """`n` distinct judge requests (demo pairs in both orders, seeds from `first_seed` on)."""
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks

    settings = JudgeSettings(positions="both", reasoning=True, max_tokens=256)
    base = [t.request for t in build_tasks(load_pairs("demo"), settings, seed=42)]
    return [base[i % len(base)].model_copy(update={"seed": first_seed + i}) for i in range(n)]


class Run:
    def __init__(
        self, requests: int, seconds: float, cpu_s: float, bad: int, stub: dict[str, Any], stub_cpu_s: float
    ) -> None:
        self.requests, self.seconds, self.cpu_s, self.bad = requests, seconds, cpu_s, bad
        self.peak = int(stub["peak_in_flight"])
        self.sent = int(stub["requests"])
        self.stub_cpu_s = stub_cpu_s


def measure(url: str, n: int, go: Callable[[], int]) -> Run:
    before = stats(url, reset=True)
    cpu0, t0 = time.process_time(), time.perf_counter()
    bad = go()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = stats(url)
    return Run(n, seconds, cpu, bad, after, after["cpu_s"] - before["cpu_s"])


class Ours:
    """The engine as the loop holds it for a whole run: meter -> call cache -> engine (what
    `ModelRoles` builds), one per in-flight level, its constraint probe and connections made
    by the warm-up. `run` hands it the requests as one batch (`generate`, the staged order)."""

    def __init__(self, url: str, inflight: int, cache_dir: Path) -> None:
        from bias_discovery.llm.config import ModelConfig
        from bias_discovery.llm.roles import ModelRoles

        config = ModelConfig.from_spec(
            f"openai/{MODEL}", base_url=url, max_concurrency=inflight, structured_outputs="vllm"
        )
        self.roles = ModelRoles({"target": config}, cache_path=Path(tempfile.mkdtemp(dir=cache_dir)) / "calls.sqlite")
        self.engine = self.roles["target"]

    def run(self, requests: list[Any], bodies: list[dict[str, Any]]) -> int:
        """The number of invalid responses (a failed batch: all)."""
        from bias_discovery.errors import BiasDiscoveryError

        try:
            responses = self.engine.generate(requests)
        except BiasDiscoveryError as exc:
            print(f"    ours failed: {exc}", file=sys.stderr)
            return len(requests)
        return sum(r.finish_reason == "error" for r in responses)

    def close(self) -> None:
        self.roles.close()


class OursSubmitted(Ours):
    """The same engine, every request submitted on its own and awaited, as the streamed loop
    asks (`llm.base.ask`, on the streamed stages' runner: `stages.streamed.run`)."""

    def run(self, requests: list[Any], bodies: list[dict[str, Any]]) -> int:
        import asyncio

        from bias_discovery.errors import BiasDiscoveryError
        from bias_discovery.llm.base import ask
        from bias_discovery.stages.streamed import run

        async def main() -> list[Any]:
            return await asyncio.gather(*(ask(self.engine, r) for r in requests))

        try:
            responses = run(main())
        except BiasDiscoveryError as exc:
            print(f"    ours-submitted failed: {exc}", file=sys.stderr)
            return len(requests)
        return sum(r.finish_reason == "error" for r in responses)


def new_loop() -> asyncio.AbstractEventLoop:
    """A bare side's loop: the same kind as the engine's (uvloop where installed)."""
    from bias_discovery.llm.aio import new_event_loop

    return new_event_loop()


class _Bare:
    """A bare client: `inflight` requests at a time through `_send`, on its own event loop
    (the same kind as the engine's), kept warm across runs."""

    def __init__(self, url: str, inflight: int) -> None:
        self.url, self.inflight, self.loop = url, inflight, new_loop()

    async def _send(self, body: dict[str, Any]) -> int:
        """POST one body; 0 for a usable reply, 1 for a failure."""
        raise NotImplementedError

    def run(self, requests: list[Any], bodies: list[dict[str, Any]]) -> int:
        async def main() -> int:
            limit = asyncio.Semaphore(self.inflight)

            async def one(body: dict[str, Any]) -> int:
                async with limit:
                    return await self._send(body)

            return sum(await asyncio.gather(*(one(b) for b in bodies)))

        return int(self.loop.run_until_complete(main()))


class BareAiohttp(_Bare):
    """One aiohttp session and a semaphore of `inflight`."""

    def __init__(self, url: str, inflight: int) -> None:
        import aiohttp

        super().__init__(url, inflight)

        async def open_session() -> Any:
            connector = aiohttp.TCPConnector(limit=inflight)
            return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))

        self.session = self.loop.run_until_complete(open_session())

    async def _send(self, body: dict[str, Any]) -> int:
        import aiohttp

        try:
            async with self.session.post(f"{self.url}/chat/completions", json=body) as reply:
                data = await reply.json()
                return 0 if reply.status == 200 and data["choices"][0]["message"]["content"] else 1
        except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError):
            return 1

    def close(self) -> None:
        self.loop.run_until_complete(self.session.close())
        self.loop.close()


class BareHttpx(_Bare):
    """The same with `httpx.AsyncClient` (a pool of `inflight` connections)."""

    def __init__(self, url: str, inflight: int) -> None:
        import httpx

        super().__init__(url, inflight)
        limits = httpx.Limits(max_connections=inflight, max_keepalive_connections=inflight)
        self.client = httpx.AsyncClient(limits=limits, timeout=600)

    async def _send(self, body: dict[str, Any]) -> int:
        import httpx

        try:
            reply = await self.client.post(f"{self.url}/chat/completions", json=body)
            return 0 if reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] else 1
        except (httpx.HTTPError, KeyError, ValueError):
            return 1

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, default=None, metavar="OUT", help="write the headline numbers and every run here"
    )
    parser.add_argument("--inflight", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per side and setting, alternating who goes first")
    parser.add_argument(
        "--waves",
        type=int,
        default=16,
        help="requests per run = waves x inflight (enough that a run's "
        "ramp-up and tail, about a second, are a small part of it)",
    )
    parser.add_argument("--min-requests", type=int, default=16384, help="at latency 0, at least this many per run")
    parser.add_argument("--with-httpx", action="store_true", help="also run a bare httpx.AsyncClient side")
    parser.add_argument(
        "--with-submit",
        action="store_true",
        help="also run ours with every request submitted on its own (the streamed order's way in)",
    )
    args = parser.parse_args()
    provenance = Provenance.start()

    from bias_discovery.llm.aio import loop_kind
    from bias_discovery.llm.openai import build_payload

    cache_dir = Path(tempfile.mkdtemp(prefix="client-ceiling-"))
    sides = ["bare", "ours"] + (["httpx"] if args.with_httpx else []) + (["submitted"] if args.with_submit else [])
    rows: list[dict[str, Any]] = []
    errors = 0
    batches = 0  # each run gets requests no other run sent: every one is a cache miss for ours
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; judge requests (verdict regex), "
        f"{args.waves} x in-flight per run (at latency 0 at least {args.min_requests}); {args.rounds} rounds per setting, alternating order; event loop: "
        f"{loop_kind()}; stub: tests/stub_openai.py"
    )
    for latency in args.latencies:
        with launch(latency) as (url, _):
            for inflight in args.inflight:
                n = args.waves * inflight if latency else max(args.waves * inflight, args.min_requests)
                clients: dict[str, Any] = {"bare": BareAiohttp(url, inflight), "ours": Ours(url, inflight, cache_dir)}
                if args.with_httpx:
                    clients["httpx"] = BareHttpx(url, inflight)
                if args.with_submit:
                    clients["submitted"] = OursSubmitted(url, inflight, cache_dir)
                for client in clients.values():  # warm-up: connections, ours' constraint probe
                    batches += 1
                    warm = make_requests(inflight, first_seed=batches * 10**6)
                    client.run(warm, [build_payload(MODEL, r, "vllm") for r in warm])
                runs: dict[str, list[Run]] = {s: [] for s in sides}
                for round_ in range(args.rounds):
                    batches += 1
                    requests = make_requests(n, first_seed=batches * 10**6)
                    bodies = [build_payload(MODEL, r, "vllm") for r in requests]  # the same bodies for every side
                    for side in sides if round_ % 2 == 0 else sides[::-1]:
                        client = clients[side]
                        run = measure(
                            url, n, lambda client=client, requests=requests, bodies=bodies: client.run(requests, bodies)
                        )
                        extra = run.sent - n  # every request answered exactly once
                        run_errors = run.bad + abs(extra)
                        errors += run_errors
                        runs[side].append(run)
                        rows.append(
                            {
                                "latency_s": latency,
                                "inflight": inflight,
                                "side": side,
                                "round": round_,
                                "requests": n,
                                "seconds": round(run.seconds, 3),
                                "req_per_s": round(n / run.seconds, 1),
                                "cpu_ms_per_request": round(1000 * run.cpu_s / n, 3),
                                "stub_peak_in_flight": run.peak,
                                "achieved_in_flight": round(n / run.seconds * latency, 1) if latency else None,
                                "stub_cpu_share": round(run.stub_cpu_s / run.seconds, 3),
                                "errors": run_errors,
                            }
                        )
                for client in clients.values():
                    client.close()
                rate = {s: sum(r.requests for r in rs) / sum(r.seconds for r in rs) for s, rs in runs.items()}
                peak = {s: max(r.peak for r in rs) for s, rs in runs.items()}
                cpu = {s: max(r.stub_cpu_s / r.seconds for r in rs) for s, rs in runs.items()}
                per_request = {
                    s: 1000 * sum(r.cpu_s for r in rs) / sum(r.requests for r in rs) for s, rs in runs.items()
                }
                line = (
                    f"latency {latency:g} s, {inflight:5d} in flight, {n} requests x {args.rounds}: "
                    + ", ".join(f"{s} {rate[s]:7.0f} req/s" for s in sides)
                    + f"; ratio ours/bare {rate['ours'] / rate['bare']:.2f}"
                )
                if latency:
                    line += "; req/s x latency " + ", ".join(f"{s} {rate[s] * latency:.0f}" for s in sides)
                line += (
                    "; stub peak in flight "
                    + ", ".join(f"{s} {peak[s]}" for s in sides)
                    + "; stub CPU (max share of a core) "
                    + ", ".join(f"{s} {cpu[s]:.0%}" for s in sides)
                    + "; CPU ms/request "
                    + ", ".join(f"{s} {per_request[s]:.2f}" for s in sides)
                )
                print(line, flush=True)
                rows.append(
                    {
                        "latency_s": latency,
                        "inflight": inflight,
                        "side": "summary",
                        **{f"req_per_s_{s}": round(rate[s], 1) for s in sides},
                        **{f"stub_peak_in_flight_{s}": peak[s] for s in sides},
                        **{f"stub_cpu_share_max_{s}": round(cpu[s], 3) for s in sides},
                        **{f"cpu_ms_per_request_{s}": round(per_request[s], 3) for s in sides},
                        "ratio": round(rate["ours"] / rate["bare"], 3),
                        "achieved_in_flight_ours": round(rate["ours"] * latency, 1) if latency else None,
                        "achieved_in_flight_bare": round(rate["bare"] * latency, 1) if latency else None,
                    }
                )

    def summary(latency: float, inflight: int) -> dict[str, Any] | None:
        return next(
            (r for r in rows if r["side"] == "summary" and r["latency_s"] == latency and r["inflight"] == inflight),
            None,
        )

    s0, s2 = summary(0.0, 2048), summary(2.0, 2048)
    result = {
        "ratio_l0_2048": s0["ratio"] if s0 else None,
        "ratio_l2_2048": s2["ratio"] if s2 else None,
        "inflight_l2_2048": s2["achieved_in_flight_ours"] if s2 else None,
        "errors": errors,
        "targets": {
            "ratio_l0_2048": ">= 0.5",
            "ratio_l2_2048": ">= 0.9",
            "inflight_l2_2048": ">= 1800",
            "errors": "== 0",
        },
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "rounds": args.rounds,
        "runs": rows,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    if args.json:
        provenance.write_json(args.json, {**result, "commit": provenance.commit})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
