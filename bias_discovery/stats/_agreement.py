"""Inter-annotator agreement (Cohen's kappa), for the annotation of exported benchmarks."""

from __future__ import annotations

from collections.abc import Sequence


def cohens_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa: agreement of two annotators beyond chance, on the same items.

    `a[i]` and `b[i]` are the labels the two annotators gave item i (any hashable values,
    e.g. ``"keep"`` / ``"reject"``). With n items, observed agreement
    ``p_o = #{i: a[i] == b[i]} / n`` and chance agreement from the two marginals
    ``p_e = sum_k (n_a(k) / n) * (n_b(k) / n)``:

        kappa = (p_o - p_e) / (1 - p_e)

    computed as ``(n * agree - S) / (n**2 - S)`` with ``S = sum_k n_a(k) * n_b(k)`` in integer
    arithmetic, so the only rounding is the final division. 1 is perfect agreement, 0 is the
    agreement expected by chance, negative is worse than chance.

    Undefined cases return NaN rather than a made-up number: no items, or ``p_e == 1`` (both
    annotators gave every item one and the same label, so agreement cannot be told apart from
    chance; report the raw agreement instead). Sequences of different lengths raise
    ValueError.
    """
    if len(a) != len(b):
        raise ValueError(f"both annotators must label the same items; got {len(a)} and {len(b)} labels")
    n = len(a)
    if n == 0:
        return float("nan")
    agree = sum(1 for x, y in zip(a, b) if x == y)
    counts_a: dict[object, int] = {}
    counts_b: dict[object, int] = {}
    for x in a:
        counts_a[x] = counts_a.get(x, 0) + 1
    for y in b:
        counts_b[y] = counts_b.get(y, 0) + 1
    s = sum(count * counts_b.get(label, 0) for label, count in counts_a.items())
    denominator = n * n - s
    if denominator == 0:
        return float("nan")
    return (n * agree - s) / denominator
