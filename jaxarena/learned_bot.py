"""The learned bot: what it sees, how it moves, and the small MLP that decides.

A learned bot only chooses where to move: one of `NUM_BOT_ACTIONS` = 9
actions, the 8 compass headings (0 east, then every 45 degrees
counter-clockwise seen from above: 2 north, 4 west, 6 south) and 8 hold. It
strikes by the scripted bots' rule (the nearest living NPC, when in melee
range and ready), so a learned bot and a scripted one differ in movement
alone and the arena's damage rules stay in one place.

Its policy is a `BotWeights`, a frozen pytree of six arrays (`init_bot_weights`),
so the arena runs it from `EnvParams.bot_weights` without importing any
training code: `bot_logits(weights, bot_observation(state, params))`. A critic of the same
shape (`init_bot_value_weights`, `bot_value`) is for actor-critic trainers
(`jaxarena.algorithms.bot_training`); the arena never reads it.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from .bots import MODE_AGGRESSIVE, MODE_EVASIVE
from .names import NUM_NPCS
from .physics import nearest_box_point, norm
from .types import BotWeights, EnvParams, EnvState, arena_diagonal, ticks

NUM_HEADINGS = 8
HOLD = NUM_HEADINGS  # the ninth action: stand still
NUM_BOT_ACTIONS = NUM_HEADINGS + 1
_ANGLES = np.arange(NUM_HEADINGS) * (2.0 * np.pi / NUM_HEADINGS)
# Row a is the unit heading of action a; the last row (hold) is zero.
HEADINGS = np.concatenate([np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], -1), np.zeros((1, 2))]).astype(np.float32)

# Observation layout. Self: x/size, z/size, hp frac, melee ready, melee cooldown
# left (fraction of a full cooldown), facing x, z, episode time fraction,
# nearest box point relative to the bot / size (x, z), orbs in flight / 10.
SELF_FEATURES = 11
# Per NPC, nearest living first and the dead last: relative x/size, z/size,
# distance / arena diagonal, alive, hp frac, within the bot's melee reach,
# within the NPC's melee reach. A dead NPC's row is all zeros.
NPC_FEATURES = 7
BOT_OBS_SIZE = SELF_FEATURES + NUM_NPCS * NPC_FEATURES
# Each action's logits and the value come from obs -> hidden -> hidden -> out, tanh.
WEIGHT_KEYS = ("w0", "b0", "w1", "b1", "w2", "b2")


# Folded into the step key for the learned bot's draw, so the draw is independent
# of the reset the same key seeds.
_SAMPLE_STREAM = 0x1EA54ED


def bot_observation(state: EnvState, params: EnvParams) -> jax.Array:
    """(BOT_OBS_SIZE,) float32: the bot's view of one arena (layout above).

    NPCs are sorted by distance (nearest living first), so the first row is
    the bot's strike target and a policy need not learn five symmetric slots.
    """
    size = jnp.float32(params.arena_size)
    rel = state.npc_pos - state.bot_pos
    dist = norm(rel)
    alive = state.npc_hp > 0.0
    order = jnp.argsort(jnp.where(alive, dist, jnp.inf))
    alive_f = alive.astype(jnp.float32)
    per_npc = jnp.concatenate(
        [
            rel / size,
            (dist / arena_diagonal(params))[:, None],
            alive_f[:, None],
            (state.npc_hp / params.npc_hp)[:, None],
            (dist <= params.bot_melee_range).astype(jnp.float32)[:, None],
            (dist <= params.npc_melee_range).astype(jnp.float32)[:, None],
        ],
        axis=-1,
    )
    per_npc = (per_npc * alive_f[:, None])[order]
    cooldown = jnp.maximum(ticks(params.bot_melee_cooldown, params.dt), 1).astype(jnp.float32)
    episode = jnp.maximum(ticks(params.episode_s, params.dt), 1).astype(jnp.float32)
    own = jnp.concatenate(
        [
            state.bot_pos / size,
            jnp.stack(
                [
                    state.bot_hp / params.bot_hp,
                    (state.bot_melee_cd == 0).astype(jnp.float32),
                    state.bot_melee_cd.astype(jnp.float32) / cooldown,
                ]
            ),
            state.bot_facing,
            (state.t.astype(jnp.float32) / episode)[None],
            (nearest_box_point(state.bot_pos, params.boxes) - state.bot_pos) / size,
            (jnp.sum(state.orb_active) / 10.0)[None],
        ]
    )
    return jnp.concatenate([own, per_npc.reshape(-1)]).astype(jnp.float32)


def bot_heading(action) -> jax.Array:
    """(..., 2) float32: the unit heading of each action; hold and out-of-range codes give zero."""
    action = jnp.asarray(action)
    valid = (action >= 0) & (action < NUM_BOT_ACTIONS)
    return jnp.asarray(HEADINGS)[jnp.where(valid, action, HOLD)]


def _dense_init(key, n_in: int, n_out: int, scale: float) -> tuple[jax.Array, jax.Array]:
    w = jax.nn.initializers.orthogonal(scale)(key, (n_in, n_out), jnp.float32)
    return w, jnp.zeros((n_out,), jnp.float32)


def _init_mlp(key: jax.Array, hidden: int, n_out: int, out_scale: float) -> BotWeights:
    if int(hidden) < 1:
        raise ValueError(f"hidden must be a positive int, got {hidden}")
    k0, k1, k2 = jax.random.split(key, 3)
    w0, b0 = _dense_init(k0, BOT_OBS_SIZE, hidden, np.sqrt(2.0))
    w1, b1 = _dense_init(k1, hidden, hidden, np.sqrt(2.0))
    w2, b2 = _dense_init(k2, hidden, n_out, out_scale)
    return BotWeights(w0=w0, b0=b0, w1=w1, b1=b1, w2=w2, b2=b2)


def _mlp(weights: BotWeights, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ weights.w0 + weights.b0)
    h = jnp.tanh(h @ weights.w1 + weights.b1)
    return h @ weights.w2 + weights.b2


def init_bot_weights(key: jax.Array, hidden: int = 64) -> BotWeights:
    """A fresh policy: BOT_OBS_SIZE -> hidden -> hidden -> NUM_BOT_ACTIONS.

    The output layer starts small (orthogonal, gain 0.01), so a fresh bot
    moves almost uniformly at random, as PPO likes to start.
    """
    return _init_mlp(key, hidden, NUM_BOT_ACTIONS, 0.01)


def init_bot_value_weights(key: jax.Array, hidden: int = 64) -> BotWeights:
    """A fresh critic of the same layout with one output (for `bot_value`)."""
    return _init_mlp(key, hidden, 1, 1.0)


def bot_logits(weights: BotWeights, obs: jax.Array) -> jax.Array:
    """(..., NUM_BOT_ACTIONS) logits from (..., BOT_OBS_SIZE) observations."""
    return _mlp(weights, obs)


def bot_value(weights: BotWeights, obs: jax.Array) -> jax.Array:
    """(...,) state values from a critic made by `init_bot_value_weights`."""
    return _mlp(weights, obs)[..., 0]


def check_bot_weights(weights) -> BotWeights:
    """The policy as a `BotWeights` of float32 arrays, or ValueError/TypeError saying what is wrong.

    For one unbatched policy (what `jaxarena.make(bot_weights=...)` takes): a
    `BotWeights`, or a mapping with the keys of `WEIGHT_KEYS` (say, weights
    read back from a file), with shapes (BOT_OBS_SIZE, H), (H,), (H, H), (H,),
    (H, NUM_BOT_ACTIONS), (NUM_BOT_ACTIONS,).
    """
    if isinstance(weights, BotWeights):
        weights = {k: getattr(weights, k) for k in WEIGHT_KEYS}
    if not isinstance(weights, Mapping) or set(weights) != set(WEIGHT_KEYS):
        got = sorted(weights) if isinstance(weights, Mapping) else type(weights).__name__
        raise TypeError(
            f"bot_weights must be a BotWeights (init_bot_weights) or a mapping with keys {list(WEIGHT_KEYS)}, got {got}"
        )
    arrays = {k: np.asarray(v) for k, v in weights.items()}
    for k, a in arrays.items():
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"bot_weights[{k!r}] must be floating point, got {a.dtype}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"bot_weights[{k!r}] holds non-finite values")
    hidden = arrays["w0"].shape[-1] if arrays["w0"].ndim == 2 else -1
    want = {
        "w0": (BOT_OBS_SIZE, hidden),
        "b0": (hidden,),
        "w1": (hidden, hidden),
        "b1": (hidden,),
        "w2": (hidden, NUM_BOT_ACTIONS),
        "b2": (NUM_BOT_ACTIONS,),
    }
    for k, shape in want.items():
        if arrays[k].shape != shape:
            raise ValueError(
                f"bot_weights[{k!r}] must have shape {shape} for a {BOT_OBS_SIZE}-float observation and "
                f"{NUM_BOT_ACTIONS} actions, got {arrays[k].shape}"
            )
    return BotWeights(**{k: jnp.asarray(a, jnp.float32) for k, a in arrays.items()})


def learned_move(key: jax.Array, state: EnvState, params: EnvParams, target, action=None):
    """(heading (2,), mode ()) of the learned bot for one tick.

    `action` (a scalar int) is an externally chosen action, e.g. a learner's
    sample; without it the action is drawn from `params.bot_weights`' logits
    with a key derived from the step key. The mode is a behavioural label,
    since a learned bot has no phases: evasive when its heading opens distance
    from its target (the nearest living NPC), aggressive otherwise.
    """
    if action is None:
        if not isinstance(params.bot_weights, BotWeights):
            raise TypeError(
                f"params.bot_weights must be a BotWeights (init_bot_weights, or check_bot_weights of a mapping), "
                f"got {type(params.bot_weights).__name__}"
            )
        logits = bot_logits(params.bot_weights, bot_observation(state, params))
        action = jax.random.categorical(jax.random.fold_in(key, _SAMPLE_STREAM), logits)
    else:
        action = jnp.asarray(action)
        if action.shape != () or not jnp.issubdtype(action.dtype, jnp.integer):
            raise TypeError(
                f"bot_action must be one scalar integer in 0..{NUM_BOT_ACTIONS - 1} per arena, "
                f"got {action.dtype}{list(action.shape)}; for a batch, jax.vmap the step"
            )
    heading = bot_heading(action)
    opening = jnp.sum(heading * (state.npc_pos[target] - state.bot_pos)) < 0.0
    return heading, jnp.where(opening, MODE_EVASIVE, MODE_AGGRESSIVE).astype(jnp.int32)
