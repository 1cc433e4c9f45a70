"""What `audit --biases` names: the built-in position and length audits, seed libraries and
their biases, a run directory's validated biases, a library file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ConfigError, LibraryError
from ..library import Bias, BiasLibrary, available_seed_libraries, load_library, load_seed_library, slugify

__all__ = ["BUILT_IN", "FACTUAL_ERROR_BIASES", "AuditTarget", "resolve_targets"]

TargetKind = Literal["position", "length", "perturbation"]

BUILT_IN: dict[str, str] = {
    "position": "the same pairs judged in both orders (no teacher)",
    "length": "the length difference the data already has (no teacher)",
}

FACTUAL_ERROR_BIASES = frozenset({"misinformation-oversight-bias"})
"""Biases whose injection is a factual error (Chen et al.'s FE perturbation): their ASR is
the factual-error variant |V_{2|2}| / |V_2|; every other bias uses Eq. 2."""


@dataclass(frozen=True)
class AuditTarget:
    """One bias to audit: a built-in (`bias` None) or a library bias the teacher injects."""

    kind: TargetKind
    id: str
    name: str
    source: str
    bias: Bias | None = None
    run_dir: Path | None = None
    """The discovery run the bias comes from (its target pairs must not be audited on)."""

    @property
    def needs_teacher(self) -> bool:
        """A library bias is injected by the teacher, unless it appends a fixed text (`Bias.append`)."""
        return self.kind == "perturbation" and (self.bias is None or self.bias.append is None)


def _from_bias(bias: Bias, source: str) -> AuditTarget:
    return AuditTarget(kind="perturbation", id=bias.id, name=bias.name, source=source, bias=bias)


def _seed_libraries() -> dict[str, BiasLibrary]:
    return {name: load_seed_library(name) for name in available_seed_libraries()}


def _known(libraries: dict[str, BiasLibrary]) -> str:
    ids = sorted({b.id for lib in libraries.values() for b in lib.biases})
    return (
        f"built-ins: {', '.join(BUILT_IN)}; seed libraries: {', '.join(libraries) or 'none found'}; "
        f"seed biases: {', '.join(ids)}; or a run directory, or a library .json file"
    )


def _run_biases(path: Path) -> list[AuditTarget]:
    from ..run import RunDir

    run = RunDir(path)
    library = run.library.load_latest()  # LibraryError names the folder when there is none
    validated = [b for b in library.biases if b.validation is not None and b.validation.accepted]
    if not validated:
        raise ConfigError(f"`biases` {path}: the run's newest library has no validated bias to audit")
    return [
        AuditTarget(kind="perturbation", id=b.id, name=b.name, source=f"run {path.name}", bias=b, run_dir=path)
        for b in validated
    ]


def _library_file(path: Path) -> list[AuditTarget]:
    library = load_library(path)
    if not library.biases:
        raise ConfigError(f"`biases` {path}: the library holds no bias")
    return [_from_bias(b, library.name) for b in library.biases]


def _one(token: str, libraries: dict[str, BiasLibrary]) -> list[AuditTarget]:
    if token in BUILT_IN:
        return [AuditTarget(kind=token, id=token, name=f"{token.capitalize()} (built-in)", source="built-in")]  # type: ignore[arg-type]
    if token in libraries:
        return [_from_bias(b, token) for b in libraries[token].biases]
    path = Path(token)
    if path.is_dir():
        return _run_biases(path)
    if path.suffix == ".json" or path.is_file():
        return _library_file(path)
    wanted = slugify(token)
    for name, library in libraries.items():
        for bias in library.biases:
            if token == bias.id or wanted == slugify(bias.name) or wanted == bias.id:
                return [_from_bias(bias, name)]
    raise ConfigError(f"`biases`: unknown bias {token!r}; known: {_known(libraries)}")


def resolve_targets(spec: str) -> list[AuditTarget]:
    """The biases `--biases` names (comma-separated), in order, each id once. Unknown names
    are an error that lists the known ones; a bad library file or run directory one that
    names it."""
    tokens = [t.strip() for t in spec.split(",")]
    if not spec.strip() or any(not t for t in tokens):
        raise ConfigError(f"`biases` {spec!r}: expected comma-separated names, e.g. position,length,authority-bias")
    libraries = _seed_libraries()
    targets: list[AuditTarget] = []
    seen: set[str] = set()
    for token in tokens:
        try:
            found = _one(token, libraries)
        except LibraryError as exc:
            raise ConfigError(f"`biases` {token}: {exc}") from None
        for target in found:
            if target.id not in seen:
                seen.add(target.id)
                targets.append(target)
    return targets
