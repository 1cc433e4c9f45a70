"""Will these vLLM servers fit on these GPUs? The arithmetic behind scripts/serve_vllm.sh.

vLLM refuses to start when its share of a GPU cannot hold the weights plus the KV cache of
one sequence of `--max-model-len` tokens, and a teacher that does not fit only shows up as
a crash on the node, after the queue wait. So the split is computed before anything starts:

    weights per GPU  = parameters x bytes per parameter / TP
    KV per token     = 2 (K and V) x layers x KV heads x head dim x bytes, per GPU: the KV
                       heads are split over TP (replicated when TP > KV heads)
    KV room per GPU  = memory fraction x GPU memory - weights per GPU - overhead
    fits             = KV room / KV per token >= max model len (one full-length sequence)

`overhead` (default 3 GiB per GPU) stands for what vLLM takes besides weights and KV cache:
the activation peak of its profiling run at the default max-num-batched-tokens, CUDA graphs,
NCCL and cuBLAS workspaces. It is an estimate; vLLM's log prints the real figures
("model weights take ...", "PyTorch activation peak memory takes ..."), and OVERHEAD_GIB
takes a measured value. Servers that share a GPU must also leave the sum of their fractions
at or below `MAX_SHARED_FRACTION` (each server's startup check wants its fraction free).

Model shapes come from a local model directory or the Hugging Face cache (config.json; the
weight bytes are the safetensors files' sizes) or else from `KNOWN_SHAPES` (the model cards'
parameter counts and config.json fields). Quantized weights (AWQ, GPTQ 4-bit) count 4 bits
plus one 16-bit scale and a 4-bit zero per group of 128 weights for the linear layers; the
embedding and output matrices stay 16-bit.

    python scripts/gpu_plan.py --gpus 8 --gpu-gib 79.6 --max-len 16384 \\
        --server teacher=Qwen/Qwen2.5-72B-Instruct:tp=4:mem=0.90:port=8000 \\
        --server target=Qwen/Qwen2.5-7B-Instruct:tp=1:mem=0.90:port=8001:replicas=4

prints the arithmetic and one `LAUNCH role index model port gpus tp mem` line per server,
and exits 1 (with the reason) when a split cannot fit. Pure stdlib: the serving script runs
it with any Python, from a checkout, without the package installed (a tool of
scripts/serve_vllm.sh, not part of the library; tests/test_serving.py loads it by path).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

GIB = 2**30
MAX_SHARED_FRACTION = 0.95
"""Fractions of servers sharing one GPU must sum to at most this (CUDA contexts, fragmentation)."""
DEFAULT_OVERHEAD_GIB = 3.0
QUANT_GROUP = 128


@dataclass(frozen=True)
class ModelShape:
    """What the memory arithmetic needs to know about a model."""

    params_b: float
    """Total parameters, in billions."""
    layers: int
    kv_heads: int
    head_dim: int
    weight_bits: int = 16
    """16 (bf16/fp16), 8 (FP8) or 4 (AWQ / GPTQ int4)."""
    embed_params_b: float = 0.0
    """Embedding plus output matrices (billions), which quantization leaves at 16 bits."""
    weight_bytes_measured: int | None = None
    """The safetensors files' total size, when the model is on disk."""
    source: str = "table"

    def weight_bytes(self) -> float:
        if self.weight_bytes_measured:
            return float(self.weight_bytes_measured)
        if self.weight_bits >= 16:
            return self.params_b * 1e9 * 2
        linear = (self.params_b - self.embed_params_b) * 1e9
        per_weight = self.weight_bits / 8 + (2 + self.weight_bits / 8) / QUANT_GROUP  # + scale, zero
        return linear * per_weight + self.embed_params_b * 1e9 * 2

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads are split over a TP group, and replicated when TP exceeds them."""
        return max(1, math.ceil(self.kv_heads / tp))

    def kv_bytes_per_token(self, tp: int, kv_bytes: int = 2) -> int:
        """K and V of one token on one GPU of a TP group."""
        return 2 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * kv_bytes


def _qwen(params_b: float, layers: int, kv_heads: int, hidden: int, tied: bool, bits: int = 16) -> ModelShape:
    vocab = 151936 if tied else 152064
    embed = vocab * hidden * (1 if tied else 2) / 1e9
    return ModelShape(params_b, layers, kv_heads, 128 if hidden >= 1536 else 64, bits, embed)


KNOWN_SHAPES: dict[str, ModelShape] = {
    # Qwen2.5 Instruct model cards: parameters, layers, Q/KV heads; head dim = hidden / Q heads.
    "Qwen/Qwen2.5-0.5B-Instruct": _qwen(0.49, 24, 2, 896, tied=True),
    "Qwen/Qwen2.5-1.5B-Instruct": _qwen(1.54, 28, 2, 1536, tied=True),
    "Qwen/Qwen2.5-3B-Instruct": _qwen(3.09, 36, 2, 2048, tied=True),
    "Qwen/Qwen2.5-7B-Instruct": _qwen(7.61, 28, 4, 3584, tied=False),
    "Qwen/Qwen2.5-14B-Instruct": _qwen(14.7, 48, 8, 5120, tied=False),
    "Qwen/Qwen2.5-32B-Instruct": _qwen(32.5, 64, 8, 5120, tied=False),
    "Qwen/Qwen2.5-72B-Instruct": _qwen(72.7, 80, 8, 8192, tied=False),
    "Qwen/Qwen2.5-7B-Instruct-AWQ": _qwen(7.61, 28, 4, 3584, tied=False, bits=4),
    "Qwen/Qwen2.5-14B-Instruct-AWQ": _qwen(14.7, 48, 8, 5120, tied=False, bits=4),
    "Qwen/Qwen2.5-32B-Instruct-AWQ": _qwen(32.5, 64, 8, 5120, tied=False, bits=4),
    "Qwen/Qwen2.5-72B-Instruct-AWQ": _qwen(72.7, 80, 8, 8192, tied=False, bits=4),
    "Qwen/Qwen2.5-32B-Instruct-GPTQ-Int4": _qwen(32.5, 64, 8, 5120, tied=False, bits=4),
    "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4": _qwen(72.7, 80, 8, 8192, tied=False, bits=4),
    # Llama 3.1 model cards / config.json: 32 or 80 layers, 8 KV heads, head dim 128.
    "meta-llama/Llama-3.1-8B-Instruct": ModelShape(8.03, 32, 8, 128, 16, 1.05),
    "meta-llama/Llama-3.1-70B-Instruct": ModelShape(70.6, 80, 8, 128, 16, 2.1),
}


class PlanError(Exception):
    """A split that cannot be computed or cannot fit; the message says why."""


def _model_dir(model: str) -> Path | None:
    """A local directory, or the newest snapshot of `model` in the Hugging Face cache."""
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path
    if "/" not in model:
        return None
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"
    )
    snapshots = sorted(glob.glob(str(hub / f"models--{model.replace('/', '--')}" / "snapshots" / "*" / "config.json")))
    return Path(snapshots[-1]).parent if snapshots else None


def read_shape(model: str) -> ModelShape:
    """The shape of `model`: from its config.json on disk, else from `KNOWN_SHAPES`."""
    directory = _model_dir(model)
    if directory is not None:
        return _shape_from_dir(directory)
    if model in KNOWN_SHAPES:
        return KNOWN_SHAPES[model]
    raise PlanError(
        f"cannot size {model}: not a local model directory, not in the Hugging Face cache, and not one of "
        f"the known models ({', '.join(sorted(KNOWN_SHAPES))}); download it first (huggingface-cli download "
        f"{model}) or set FIT_CHECK=0 to start without the check"
    )


def _shape_from_dir(directory: Path) -> ModelShape:
    config_path = directory / "config.json"
    try:
        config = json.loads(config_path.read_text())
        text = config.get("text_config", config)
        layers = int(text["num_hidden_layers"])
        q_heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or q_heads)
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // q_heads)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"{config_path}: cannot read the model's layers and heads ({exc})") from exc
    quant = config.get("quantization_config") or {}
    bits = int(quant.get("bits") or (8 if "fp8" in str(quant.get("quant_method", "")) else 16))
    measured = sum(p.stat().st_size for p in directory.glob("*.safetensors")) or None
    if measured is None:
        raise PlanError(f"{directory}: no *.safetensors files to size the weights")
    return ModelShape(0.0, layers, kv_heads, head_dim, bits, weight_bytes_measured=measured, source=str(config_path))


# --------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------


@dataclass
class ServerSpec:
    role: str
    model: str
    tp: int = 1
    mem: float = 0.9
    port: int = 8000
    replicas: int = 1


@dataclass
class Launch:
    role: str
    index: int
    model: str
    port: int
    gpus: list[int]
    tp: int
    mem: float


@dataclass
class Plan:
    launches: list[Launch] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_server(text: str) -> ServerSpec:
    """`role=MODEL[:tp=N][:mem=F][:port=P][:replicas=R]` (MODEL may contain ':' only before
    the first option)."""
    role, sep, rest = text.partition("=")
    if not sep or not rest:
        raise PlanError(f"--server {text!r}: expected role=MODEL[:tp=N][:mem=F][:port=P][:replicas=R]")
    parts = rest.split(":")
    model, options = parts[0], parts[1:]
    spec = ServerSpec(role=role, model=model)
    for option in options:
        key, _, value = option.partition("=")
        try:
            if key == "tp":
                spec.tp = int(value)
            elif key == "mem":
                spec.mem = float(value)
            elif key == "port":
                spec.port = int(value)
            elif key == "replicas":
                spec.replicas = int(value)
            else:
                raise PlanError(f"--server {text!r}: unknown option {key!r}")
        except ValueError:
            raise PlanError(f"--server {text!r}: {key} must be a number, got {value!r}") from None
    if spec.tp < 1 or spec.replicas < 1 or not 0 < spec.mem <= 1:
        raise PlanError(f"--server {text!r}: tp and replicas must be >= 1 and mem in (0, 1]")
    return spec


def make_plan(
    servers: Sequence[ServerSpec],
    *,
    n_gpus: int,
    gpu_gib: float,
    max_len: int,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
    kv_bytes: int = 2,
) -> Plan:
    """Place every server (replicas on the next free GPUs, wrapping round to share GPUs when
    there are too few) and check each fits, with the arithmetic in `plan.lines`."""
    plan = Plan()
    next_gpu = 0
    used: dict[int, float] = {}
    plan.lines.append(
        f"GPUs: {n_gpus} x {gpu_gib:.1f} GiB; max model len {max_len} tokens; overhead {overhead_gib:g} GiB per GPU "
        f"(activations, CUDA graphs, workspaces: an estimate); KV cache {kv_bytes} bytes per value"
    )
    for spec in servers:
        try:
            shape = read_shape(spec.model)
        except PlanError as exc:
            plan.problems.append(str(exc))
            continue
        if spec.tp > n_gpus:
            plan.problems.append(f"{spec.role}: tensor parallel {spec.tp} needs {spec.tp} GPUs, the node has {n_gpus}")
            continue
        weights = shape.weight_bytes() / spec.tp / GIB
        per_token = shape.kv_bytes_per_token(spec.tp, kv_bytes)
        budget = spec.mem * gpu_gib
        room = budget - weights - overhead_gib
        tokens = kv_room_tokens(
            shape, tp=spec.tp, mem=spec.mem, gpu_gib=gpu_gib, overhead_gib=overhead_gib, kv_bytes=kv_bytes
        )
        how = (
            f"{shape.weight_bytes_measured / GIB:.1f} GiB of safetensors"
            if shape.weight_bytes_measured
            else f"{shape.params_b:g}B params x {_bytes_per_param(shape):.2f} B"
        )
        heads = shape.kv_heads_per_gpu(spec.tp)
        plan.lines.append(
            f"{spec.role} {spec.model} (shape: {shape.source}), TP {spec.tp}, mem {spec.mem:.2f}:\n"
            f"  weights {how} / TP {spec.tp} = {weights:.1f} GiB per GPU\n"
            f"  KV per token per GPU = 2 x {shape.layers} layers x {heads} KV heads x {shape.head_dim} x {kv_bytes} B"
            f" = {per_token / 1024:.0f} KiB\n"
            f"  KV room per GPU = {spec.mem:.2f} x {gpu_gib:.1f} - {weights:.1f} - {overhead_gib:g} = {room:.1f} GiB"
            f" = {tokens:,} tokens = {tokens / max_len:.1f} sequences of {max_len}"
        )
        if tokens < max_len:
            plan.problems.append(
                f"{spec.role} {spec.model} does not fit at TP {spec.tp} with mem {spec.mem:.2f} of a {gpu_gib:.1f} GiB GPU: "
                + (
                    f"{budget:.1f} GiB leaves {room:.1f} GiB after {weights:.1f} GiB of weights per GPU and "
                    f"{overhead_gib:g} GiB overhead, "
                    if room > 0
                    else f"its {budget:.1f} GiB hold less than {weights:.1f} GiB of weights per GPU plus {overhead_gib:g} GiB "
                    "overhead, "
                )
                + f"room for {tokens:,} KV tokens, fewer than one {max_len}-token sequence "
                f"({max_len * per_token / GIB:.1f} GiB); raise the fraction or TP, lower MAX_LEN, or pick a smaller "
                "or quantized model"
            )
        for index in range(spec.replicas):
            if next_gpu + spec.tp > n_gpus:
                next_gpu = 0  # too few GPUs: share from the first
            gpus = list(range(next_gpu, next_gpu + spec.tp))
            next_gpu += spec.tp
            for gpu in gpus:
                used[gpu] = used.get(gpu, 0.0) + spec.mem
            plan.launches.append(Launch(spec.role, index, spec.model, spec.port + index, gpus, spec.tp, spec.mem))
    for gpu, total in sorted(used.items()):
        sharing = [f"{launch.role}#{launch.index}" for launch in plan.launches if gpu in launch.gpus]
        if len(sharing) > 1:
            plan.lines.append(f"GPU {gpu} shared by {', '.join(sharing)}: fractions sum to {total:.2f}")
        if total > MAX_SHARED_FRACTION + 1e-9:
            plan.problems.append(
                f"GPU {gpu} is given to {', '.join(sharing)} whose memory fractions sum to {total:.2f} > "
                f"{MAX_SHARED_FRACTION}: the later server's startup check would find too little free memory; "
                "lower the fractions, or use more GPUs"
            )
    return plan


def kv_room_tokens(
    shape: ModelShape,
    *,
    tp: int,
    mem: float,
    gpu_gib: float,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
    kv_bytes: int = 2,
) -> int:
    """KV tokens one server holds: its memory fraction less weights and overhead, per GPU of
    its TP group, over the KV bytes of one token there (the arithmetic `make_plan` prints)."""
    room = mem * gpu_gib - shape.weight_bytes() / tp / GIB - overhead_gib
    return int(room * GIB / shape.kv_bytes_per_token(tp, kv_bytes)) if room > 0 else 0


def requests_in_flight(
    shape: ModelShape,
    *,
    tp: int,
    mem: float,
    gpu_gib: float,
    tokens_per_request: int,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
) -> int:
    """About how many requests of `tokens_per_request` (prompt + output) a server's KV cache
    holds at once: a `max_concurrency` that keeps vLLM's batch full without a queue (queue time
    counts against the request deadline). Derived from memory, not measured on a GPU."""
    return kv_room_tokens(shape, tp=tp, mem=mem, gpu_gib=gpu_gib, overhead_gib=overhead_gib) // tokens_per_request


def _bytes_per_param(shape: ModelShape) -> float:
    return shape.weight_bytes() / (shape.params_b * 1e9) if shape.params_b else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--gpu-gib", type=float, required=True)
    parser.add_argument("--max-len", type=int, required=True)
    parser.add_argument("--overhead-gib", type=float, default=DEFAULT_OVERHEAD_GIB)
    parser.add_argument("--kv-bytes", type=int, default=2, help="1 with --kv-cache-dtype fp8")
    parser.add_argument("--server", action="append", default=[], help="role=MODEL[:tp=N][:mem=F][:port=P][:replicas=R]")
    args = parser.parse_args(argv)
    try:
        servers = [parse_server(s) for s in args.server]
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = make_plan(
        servers,
        n_gpus=args.gpus,
        gpu_gib=args.gpu_gib,
        max_len=args.max_len,
        overhead_gib=args.overhead_gib,
        kv_bytes=args.kv_bytes,
    )
    for line in plan.lines:
        print(line)
    for launch in plan.launches:
        gpus = ",".join(str(g) for g in launch.gpus)
        print(f"LAUNCH {launch.role} {launch.index} {launch.model} {launch.port} {gpus} {launch.tp} {launch.mem:g}")
    if plan.problems:
        for problem in plan.problems:
            print(f"does not fit: {problem}", file=sys.stderr)
        return 1
    print("fits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
