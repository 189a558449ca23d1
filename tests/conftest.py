"""Shared helpers: hand-built arena states and one-tick stepping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.spawn import initial_state


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
