"""The protocol's combinations, one module each, and the registry that maps their names to them.

Every module of this package defines `COMBINATION`, a
`protocol.combination.Combination`; `registry()` finds them all the first
time it is asked, so a new combination is a new module here (and its test),
with nothing to register; one defined elsewhere (a study's, a test's) joins
with `register`. The configuration checks names against it, the command line
takes each combination's flags from it, the runner plays its cells through
it, and the summary, report, figures and console take their optional
sections from it (`sections`).
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
            if combination is not None:
                _check_name(combination, found, info.name)
                found[combination.name] = combination
        _REGISTRY.update(sorted(found.items()))
    return _REGISTRY


def register(combination: Combination) -> Combination:
    """Adds a combination defined outside this package to the registry; returns it. Its name must be free."""
    found = registry()
    _check_name(combination, found, combination.about)
    found[combination.name] = combination
    ordered = sorted(found.items())
    found.clear()
    found.update(ordered)
    return combination


def _check_name(combination: Combination, found: dict, where: str) -> None:
    # A label is "<name>-<variant>" and an episode set "<name>:<squad>": a name holds neither; the
    # command line splits --combinations at commas and upper-cases it.
    name = combination.name
    if not name or name in found or any(c in name for c in "-:, ") or name != name.upper():
        raise RuntimeError(f"combination name {name!r} of {where} is taken or not a name")


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


__all__ = ["get", "names", "of_label", "register", "registry", "sections"]
