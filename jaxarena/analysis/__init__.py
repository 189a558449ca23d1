"""Analyses built on the arena, not part of it: what a tag is worth, and what it asks of the squad.

- `oracle`: Q(s, tag) of any decision state by playouts (`price_states`), regret, and
  Combination O's planner (`oracle_tag_source`); see docs/oracle.md.
- `intents`: one intent measure per tag (coverage, damage rate, flank share, far share),
  accumulated per episode by the episode runner; see docs/arena.md, "Intents".

Both are pure JAX over `jaxarena.runner`; the arena itself imports neither.
"""

from __future__ import annotations

import importlib

_SUBMODULES = ("intents", "oracle")


def __getattr__(name: str):
    # `jaxarena.analysis.oracle` without an explicit import, as for the arena's own submodules.
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
