"""A run's biases measured on other data: that data against the items the run discovered them on."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import RunConfig
from ..data.loaders import describe_source, load_pairs
from ..data.overlap import DataOverlap, PairKey, check_overlap, content_hash, find_overlap, pair_keys
from ..data.pairs import PreferencePair
from .rundir import RunDir


def discovery_keys(run: RunDir, config: RunConfig) -> tuple[list[PairKey], str]:
    """The items a run discovered its biases on, and their description: the target pairs its
    iterations perturbed (with their original texts), else its configured target data."""
    keys: dict[str, str] = {}
    for t in run.iterations():
        perturbed = run.iteration(t).perturbed
        if t > 0 and perturbed.exists():
            for pair in perturbed.read():
                keys.setdefault(pair.pair_id, content_hash(pair.question, pair.chosen, pair.original_rejected))
    if keys:
        return [PairKey(i, c) for i, c in keys.items()], f"run {run.root.name}'s {len(keys)} target pairs"
    d = config.data
    pairs = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed)
    return pair_keys(pairs), f"run {run.root.name}'s data.target {describe_source(d.target, d.data_dir, portable=True)}"


def check_run_overlap(
    run: RunDir, config: RunConfig, pairs: Sequence[PreferencePair], *, data_name: str, allow: bool
) -> DataOverlap:
    """`pairs` (data a run's biases are measured on) against the items the run discovered them
    on, by id and content: refused unless `allow` (`--allow-overlap`), recorded either way."""
    keys, name = discovery_keys(run, config)
    overlap = find_overlap(keys, pair_keys(pairs), discovery_name=name, validation_name=data_name)
    return check_overlap(overlap, allow=allow, how_to_allow="pass `allow_overlap`")
