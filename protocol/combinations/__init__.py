"""The protocol's combinations, one module each, and the registry that maps their names to them.

Every module of this package defines `COMBINATION`, a
`protocol.combination.Combination`; `registry()` finds them all the first
time it is asked, so a new combination is a new module here (and its test),
with nothing to register. The configuration checks names against it, the
runner plays its cells through it, and the summary, report, figures and
console take their optional sections from it (`sections`).
"""

from __future__ import annotations

import importlib
import pkgutil

from ..combination import Combination, ReportSection

_REGISTRY: dict[str, Combination] = {}


def registry() -> dict[str, Combination]:
    """Every combination by name, in name order."""
    if not _REGISTRY:
        found: dict[str, Combination] = {}
        for info in pkgutil.iter_modules(__path__):
            combination = getattr(importlib.import_module(f"{__name__}.{info.name}"), "COMBINATION", None)
            if combination is None:
                continue
            if combination.name in found or "-" in combination.name or ":" in combination.name:
                raise RuntimeError(f"combination name {combination.name!r} of {info.name} is taken or not a name")
            found[combination.name] = combination
        _REGISTRY.update(sorted(found.items()))
    return _REGISTRY


def names() -> tuple[str, ...]:
    return tuple(registry())


def get(name: str) -> Combination:
    """The combination called `name`; a ValueError that lists the others if there is none."""
    if name not in registry():
        raise ValueError(f"unknown combination {name!r}; choose from {names()}")
    return registry()[name]


def of_label(label: str) -> Combination:
    """The combination a cell label belongs to: "C-N1" is a variant of C."""
    return get(label.split("-", 1)[0])


def sections(config=None) -> list[ReportSection]:
    """The report sections of every combination, each once, in rank order; with `config`, those that
    apply to it."""
    unique = {s.key: s for c in registry().values() for s in c.sections}
    return sorted((s for s in unique.values() if config is None or s.applies(config)), key=lambda s: s.rank)


__all__ = ["get", "names", "of_label", "registry", "sections"]
