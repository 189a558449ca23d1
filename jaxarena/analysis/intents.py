"""What each strategy tag asks of the squad: one intent measure per tag, and the shaping that pays for it.

The four measures (docs/arena.md, "Intents") are per-episode averages over
the ticks of the fight, computed from the state the squad acted in (the damage
rate from what the tick's step took off the bot):

    tag         measure           definition                                          more intent
    ----------  ----------------  --------------------------------------------------  -----------
    Surround    coverage          1 - widest bearing gap in the NPCs' ring, scaled    higher
    Aggressive  damage_rate       HP the squad takes off the bot per second (HP/s)    higher
    Flank       flank_share       share of living NPC-ticks at 60-120 deg from the    higher
                                  bot's facing and within 8 u of it
    Retreat     far_share         share of living NPC-ticks at >= 8 u from the bot    higher

Two more are measured and reported (`EXTRA_MEASURES`). `lateral_share`,
the share at 60-120 deg at any distance, was Flank's earlier measure. The
paper's Flank is "approach from the bot's lateral arcs", and at any distance
the arcs are reached without flanking: a squad scattered by Retreat stands in them 79% of the time 38 u off the evasive
bot, and so does A's chase of it, 9 u behind (docs/arena.md, "Intents").
Within 8 u, the line the fight and Retreat are drawn at, the arcs count
only for a squad in the fight.

`distance` (mean distance living NPC -> bot, u) was
Aggressive's measure before `damage_rate`. It counts the chase, not
the attack: against the evasive bot, A's winning chase keeps 9 u off the bot,
farther than B-obey's Surround ring, which wins 26%. Both read "aggressive"
plausibly; damage rate is the one that says whether a squad presses
the attack (docs/arena.md, "Intents").

Coverage is 1 when the living NPCs stand evenly around the bot and falls with
the widest gap in their ring (see `coverage`).

The fight starts at the first tick a living NPC is within 8 u of the bot;
an episode whose squad never gets that close is averaged over all its
ticks. Averaged from the spawn instead, the walk in dominates short
episodes: the shipped A kills the aggressive bot in 5.5 s and measures
8.4 u from it over the whole episode, 3.4 u over the fight.

The tag-response matrix (`benchmarks/tag_response.py`) holds each tag for whole episodes and asks
whether each measure is best under its own tag.

The shaping that trains these intents is `rewards.intent_shaping` (the
"intent" recipe, `EnvParams.shaping_recipe = 1`) or `rewards.obey_shaping`
("obey", 2).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..names import TAG_NAMES
from ..physics import norm
from ..rewards import RETREAT_DISTANCE, bearing_cos_sin
from ..runner import Accumulator, Tick

#: One measure per tag, in tag order; the tag-response matrix's columns.
MEASURES = ("coverage", "damage_rate", "flank_share", "far_share")
#: +1 where a higher value means more of the tag's intent, -1 where lower does (all higher, today).
DIRECTION = (1.0, 1.0, 1.0, 1.0)
#: Measured and reported beside `MEASURES`, but no tag's target.
EXTRA_MEASURES = ("distance", "lateral_share")
MEASURE_OF_TAG = dict(zip(TAG_NAMES, MEASURES, strict=True))


def coverage(npc_pos: jax.Array, bot_pos: jax.Array, alive: jax.Array) -> jax.Array:
    """() How closed the ring of living NPCs around the bot is: 1 evenly spread, 0 all on one bearing.

    From the largest bearing gap between neighbouring living NPCs (the bot's
    widest way out): (2 pi - gap) / (2 pi - 2 pi / n). Unlike the spread of
    directions, this tells a ring from two flanking groups on opposite sides
    (gap 180 degrees: 0.63 for five NPCs). Fewer than two living NPCs: 0.
    """
    v = npc_pos - bot_pos
    bearing = jnp.where(alive, jnp.arctan2(v[:, 1], v[:, 0]), jnp.inf)
    ordered = jnp.sort(bearing)  # living first, ascending; the dead (inf) last
    n = jnp.sum(alive)
    index = jnp.arange(ordered.shape[0])
    steps = jnp.where(index[1:] < n, ordered[1:] - ordered[:-1], 0.0)
    wrap = ordered[0] + 2 * np.pi - ordered[jnp.maximum(n - 1, 0)]
    gap = jnp.maximum(jnp.max(steps), wrap)
    even = 2 * np.pi / jnp.maximum(n, 2)
    return jnp.where(n >= 2, jnp.clip((2 * np.pi - gap) / (2 * np.pi - even), 0.0, 1.0), 0.0)


def tick_measures(state, alive: jax.Array) -> dict[str, jax.Array]:
    """One arena's per-tick sums: living NPC-ticks and each measure's numerator."""
    dist = norm(state.npc_pos - state.bot_pos)
    cos, _ = bearing_cos_sin(state.npc_pos, state.bot_pos, state.bot_facing)
    lateral = jnp.abs(cos) < 0.5  # 60-120 degrees off the facing, either side
    return {
        "npc_ticks": jnp.sum(alive),
        "ticks": jnp.any(alive).astype(jnp.int32),
        "coverage": coverage(state.npc_pos, state.bot_pos, alive) * jnp.any(alive),
        "distance": jnp.sum(jnp.where(alive, dist, 0.0)),
        "lateral_share": jnp.sum(alive & lateral),
        "far_share": jnp.sum(alive & (dist >= RETREAT_DISTANCE)),
        "flank_share": jnp.sum(alive & lateral & (dist < RETREAT_DISTANCE)),
    }


def _engaged(state, alive: jax.Array) -> jax.Array:
    """() whether a living NPC is within RETREAT_DISTANCE of the bot: the fight has started."""
    return jnp.any(alive & (norm(state.npc_pos - state.bot_pos) < RETREAT_DISTANCE))


def _zeros(n: int) -> dict:
    return {
        "npc_ticks": jnp.zeros(n, jnp.int32),
        "ticks": jnp.zeros(n, jnp.int32),
        "coverage": jnp.zeros(n),
        "distance": jnp.zeros(n),
        "lateral_share": jnp.zeros(n, jnp.int32),
        "far_share": jnp.zeros(n, jnp.int32),
        "flank_share": jnp.zeros(n, jnp.int32),
        "damage": jnp.zeros(n),
    }


def _update(acc: dict, tick: Tick) -> dict:
    alive = (tick.state.npc_hp > 0.0) & tick.running[:, None]
    sums = jax.vmap(tick_measures)(tick.state, alive)
    # The step's damage, killing blow included; an ended episode's ticks add nothing.
    sums["damage"] = jnp.where(tick.running, tick.next_state.damage_dealt - tick.state.damage_dealt, 0.0)
    engaged = acc["engaged"] | jax.vmap(_engaged)(tick.state, alive)

    def add(total, s, gate):
        return total + jnp.where(gate, s, 0).astype(total.dtype)

    return {
        "engaged": engaged,
        "all": jax.tree.map(lambda a, s: add(a, s, True), acc["all"], sums),
        "fight": jax.tree.map(lambda a, s: add(a, s, engaged), acc["fight"], sums),
    }


#: The runner accumulator of the intent measures; `episode_measures` turns it into per-episode values.
INTENTS = Accumulator(
    init=lambda n: {"engaged": jnp.zeros(n, bool), "all": _zeros(n), "fight": _zeros(n)},
    update=_update,
)


def episode_measures(acc: dict, dt: float) -> dict[str, jax.Array]:
    """Per-episode measures (N,) from the `INTENTS` accumulator's final value: over the fight, else all ticks.

    `dt` is the arena's tick length (s), `EnvParams.dt`, for the damage rate:
    required, since a default would silently misstate the rate of an arena
    built with another tick.
    """
    fought = acc["fight"]["npc_ticks"] > 0
    sums = jax.tree.map(lambda f, a: jnp.where(fought, f, a), acc["fight"], acc["all"])
    npc_ticks = jnp.maximum(sums["npc_ticks"], 1).astype(jnp.float32)
    ticks = jnp.maximum(sums["ticks"], 1)
    return {
        "coverage": sums["coverage"] / ticks,
        "damage_rate": sums["damage"] / (ticks * dt),
        "distance": sums["distance"] / npc_ticks,
        "lateral_share": sums["lateral_share"] / npc_ticks,
        "far_share": sums["far_share"] / npc_ticks,
        "flank_share": sums["flank_share"] / npc_ticks,
    }
