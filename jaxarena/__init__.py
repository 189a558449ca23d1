"""jaxarena: the paper's 5-vs-1 NPC combat arena as pure, vectorised JAX.

env, params = jaxarena.make("Arena-v0", bot="balanced")
obs, state = env.reset(key, params)
obs, state, reward, done, info = env.step(key, state, actions, params)

Every id in `REGISTERED_IDS` has this gymnax interface, with
`observation_space(params)` and `action_space(params)` (`jaxarena.spaces`);
`jaxarena.make_task("paper-balanced")` builds one of the canonical `TASKS`.

The package imports lazily: the plain-Python vocabulary (`jaxarena.names`:
tags, bots, outcomes, fallback reasons) is usable without loading JAX, and
the arena's names below load it on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import host_memory  # noqa: F401 - keeps freed large buffers in the process (see its docstring)
from .names import (
    ACTIONS,
    BOT_TYPES,
    FALLBACK_REASONS,
    LLM_FEATURES,
    NUM_ACTIONS,
    NUM_NPCS,
    NUM_TAGS,
    OUTCOMES,
    TAG_NAMES,
    TAGS,
    bot_index,
    tag_index,
)

__version__ = "0.1.0"

# Public name -> the submodule that defines it; imported on first access (PEP 562).
_LAZY = {
    "ARENA_IDS": "registry",
    "Arena": "env",
    "BatchedArena": "batched",
    "EnvParams": "types",
    "EnvState": "types",
    "OBS_SIZE": "types",
    "REGISTERED_IDS": "registry",
    "SCENARIOS": "scenarios",
    "TASKS": "tasks",
    "make": "registry",
    "make_jaxmarl": "registry",
    "make_task": "tasks",
    "llm_features": "observe",
    "make_runner": "runner",
}

if TYPE_CHECKING:
    from .batched import BatchedArena
    from .env import Arena
    from .observe import llm_features
    from .registry import ARENA_IDS, REGISTERED_IDS, make, make_jaxmarl
    from .runner import make_runner
    from .scenarios import SCENARIOS
    from .tasks import TASKS, make_task
    from .types import OBS_SIZE, EnvParams, EnvState


# Submodules reachable as attributes (`jaxarena.wrappers.LogWrapper`) without an explicit import.
_SUBMODULES = (
    "analysis",
    "batched",
    "batched_rules",
    "bot_arena",
    "bots",
    "checks",
    "env",
    "files",
    "formations",
    "learned_bot",
    "names",
    "observe",
    "physics",
    "policies",
    "registry",
    "render",
    "rewards",
    "runner",
    "scenarios",
    "spaces",
    "spawn",
    "tasks",
    "types",
    "wrappers",
)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


__all__ = [
    "ACTIONS",
    "ARENA_IDS",
    "BOT_TYPES",
    "FALLBACK_REASONS",
    "LLM_FEATURES",
    "NUM_ACTIONS",
    "NUM_NPCS",
    "NUM_TAGS",
    "OBS_SIZE",
    "OUTCOMES",
    "REGISTERED_IDS",
    "SCENARIOS",
    "TASKS",
    "TAGS",
    "TAG_NAMES",
    "Arena",
    "BatchedArena",
    "EnvParams",
    "EnvState",
    "bot_index",
    "llm_features",
    "make",
    "make_jaxmarl",
    "make_runner",
    "make_task",
    "tag_index",
]
