"""Shared helpers: hand-built arena states, one-tick stepping, and scripts loaded from their files."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.spawn import initial_state


def load_script(path: Path, name: str):
    """The script at `path` (run as a file, not installed as a module) as a module called `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_state(params, npc_pos=None, bot_pos=None, **fields):
    """A fresh state with chosen positions (and any other EnvState fields)."""
    state = initial_state(jax.random.key(0), params)
    if npc_pos is not None:
        fields["npc_pos"] = jnp.asarray(npc_pos, jnp.float32)
    if bot_pos is not None:
        fields["bot_pos"] = jnp.asarray(bot_pos, jnp.float32)
    return state.replace(**{k: jnp.asarray(v) for k, v in fields.items()})


# Five NPCs in a row well south of the central box, far from the bot unless moved.
SPREAD = np.array([[4.0, 3.0], [9.0, 3.0], [14.0, 3.0], [19.0, 3.0], [24.0, 3.0]], np.float32)


@pytest.fixture
def still_bot():
    """An arena whose bot neither moves nor hurts, to isolate NPC rules."""
    return jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0)


def actions(*values):
    return jnp.asarray(values, jnp.int32)


# --- Test tiers -------------------------------------------------------------------------------
# Every test is marked by the layer it checks, from its folder (or, at the top level, its
# module), so `pytest -m core` runs the environment and its API alone and `-m "llm and not slow"`
# one layer. `slow` (long rollouts, training runs, measured claims) and `long` (the slow tier's
# longest checks) are set per test.
LAYER_OF_FOLDER = {
    "algorithms": "train",
    "llm": "llm",
    "protocol": "protocol",
    "selector": "selector",
    "coder": "coder",
    "studies": "llm",  # the research studies in studies/: the tag model's readers, glance tables, the arena's fit
}
# Top-level modules that are not the env and its API: analysis tools built on the env, the shipped
# policies, and the project's own checks (docs, code size, notebooks' outputs, command-line errors).
LAYER_OF_MODULE = {
    "test_oracle": "analysis",
    "test_intents": "analysis",
    "test_history": "llm",
    "test_learned_bot": "analysis",
    "test_zoo": "train",
    "test_zoo_measured": "train",
    "test_docs": "project",
    "test_code_size": "project",
    "test_layers": "project",
    "test_notebook_outputs": "project",
    "test_cli_errors": "project",
    "test_cli_help": "project",
    "test_extras": "project",
    "test_gpu_suite": "project",
    "test_roofline": "project",
}


# Markers whose tests stay out unless the -m expression names them: `slow` (CI's slow tier) and
# `long` (the slow tier's longest checks, which CI skips: `pytest -m long`).
OPT_IN_MARKERS = ("slow", "long")


def names_marker(markexpr: str | None, marker: str) -> bool:
    """Whether a -m expression names `marker` as a word (`-m "slow and llm"`, `-m "not long"`)."""
    return re.search(rf"\b{marker}\b", markexpr or "") is not None


def layer_of(path) -> str:
    """The tier marker of a test file: its folder's layer, else its module's, else core."""
    folder = path.parent.name
    if folder in LAYER_OF_FOLDER:
        return LAYER_OF_FOLDER[folder]
    return LAYER_OF_MODULE.get(path.stem, "core")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    layers = {"core", *LAYER_OF_FOLDER.values(), *LAYER_OF_MODULE.values()}
    for item in items:
        # A test may name its own layer (a scripted squad's check among the env's); else its module's.
        if not any(item.get_closest_marker(layer) for layer in layers):
            item.add_marker(getattr(pytest.mark, layer_of(item.path)))
    # Slow and long tests run only when the -m expression names their marker: `-m core` stays the
    # fast inner loop, and `-m slow` (CI's slow tier) leaves the long checks out.
    for marker in OPT_IN_MARKERS:
        if not names_marker(config.option.markexpr, marker):
            held = [item for item in items if item.get_closest_marker(marker)]
            if held:
                config.hook.pytest_deselected(items=held)
                items[:] = [item for item in items if not item.get_closest_marker(marker)]
