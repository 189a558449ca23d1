"""Batched evaluation of a policy: one episode per arena, outcome and tactics per episode.

    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.algorithms.evaluation import run_episodes, wilson_interval
    policy, params = load_policy("A", greedy=True)
    res = run_episodes(policy, params, "aggressive", n=1000)

Both functions are the one episode runner (`jaxarena.runner`) with the tag
held fixed for the whole episode (`tag`), e.g. to test a Combination B
policy's response to each tag, plus an accumulator of where the squad stood.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.names import BOT_TYPES, BOT_WIN, NPC_WIN, NUM_TAGS, OUTCOMES, TIMEOUT, tag_index
from jaxarena.physics import norm
from jaxarena.policies import Policy
from jaxarena.rewards import bearing_cos_sin
from jaxarena.runner import Accumulator, Tick, hold_tags, make_runner


def _tactics_update(acc: dict, tick: Tick) -> dict:
    """Living NPC-ticks, their summed distance to the bot, and those in the bot's lateral arcs."""
    state = tick.state
    alive = (state.npc_hp > 0.0) & tick.running[:, None]
    dist = norm(state.npc_pos - state.bot_pos[:, None, :])
    cos, _ = jax.vmap(bearing_cos_sin)(state.npc_pos, state.bot_pos, state.bot_facing)
    return {
        "ticks": acc["ticks"] + jnp.sum(alive, -1),
        "dist": acc["dist"] + jnp.sum(jnp.where(alive, dist, 0.0), -1),
        "lateral": acc["lateral"] + jnp.sum(alive & (jnp.abs(cos) < 0.5), -1),
    }


TACTICS = Accumulator(
    init=lambda n: {"ticks": jnp.zeros(n, jnp.int32), "dist": jnp.zeros(n), "lateral": jnp.zeros(n, jnp.int32)},
    update=_tactics_update,
)


def _fixed_tag_runner(policy: Policy, env_id: str, n: int, **env_overrides):
    """`run(policy_params, env_params, key, tag)` holding `tag` (traced) for the whole episode."""
    env, params = jaxarena.make(env_id, **env_overrides)
    return make_runner(env, params, policy, hold_tags, n, accumulators={"tactics": TACTICS}), params


def run_episodes(
    policy: Policy,
    policy_params: Any,
    bot: str | int,
    n: int = 1000,
    seed: int = 0,
    tag: int = 0,
    env_id: str = "Arena-v0",
    **env_overrides,
) -> dict[str, np.ndarray]:
    """Play `n` seeded episodes in parallel with `policy(policy_params, obs, key)` under a fixed `tag`.

    `env_id` picks the observation: a policy trained on "ArenaFacing-v0"
    (`policy.env_id`) needs it here too.

    Returns numpy arrays of shape (n,): `outcome` (1 NPC win, 2 bot win,
    3 timeout), `episode_time` (s), `damage_dealt` (HP the squad took off
    the bot), `episode_return` (rewards summed, averaged over the 5 NPCs;
    the shaping follows `shaping_weight`), `mean_distance` (NPC-bot distance in u,
    averaged over living NPC-ticks) and `lateral_share` (share of living
    NPC-ticks in the bot's lateral arcs, 60 < |theta| < 120 degrees).
    """
    tag = tag_index(tag)
    run, params = _fixed_tag_runner(policy, env_id, n, bot=bot, **env_overrides)
    return _summary(run(policy_params, params, jax.random.PRNGKey(seed), jnp.int32(tag)))


def _summary(result) -> dict[str, np.ndarray]:
    result = jax.device_get(result)
    tactics = result.extras["tactics"]
    live_ticks = np.maximum(tactics["ticks"], 1)
    return {
        "outcome": result.outcome,
        "episode_time": result.duration_s,
        "damage_dealt": result.damage_dealt,
        "episode_return": result.team_return,
        "mean_distance": tactics["dist"] / live_ticks,
        "lateral_share": tactics["lateral"] / live_ticks,
    }


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def outcome_summary(outcome: np.ndarray) -> dict[str, dict[str, float]]:
    """NPC win / bot win / timeout rates with 95% Wilson intervals."""
    n = len(outcome)
    out = {}
    for code in (NPC_WIN, BOT_WIN, TIMEOUT):
        name = OUTCOMES[code]
        k = int(np.sum(outcome == code))
        lo, hi = wilson_interval(k, n)
        out[name] = {"rate": k / n, "lo": lo, "hi": hi, "count": k}
    out["n"] = n
    return out


def tag_response(
    policy: Policy,
    policy_params: Any,
    bots: tuple[str, ...] = BOT_TYPES,
    n: int = 256,
    seed: int = 0,
    env_id: str = "Arena-v0",
) -> dict[str, np.ndarray]:
    """How a Combination B policy plays under each fixed tag, against each bot.

    Every (bot, tag) cell replays the same `n` seeded episodes, so tags are
    compared on paired starts. Returns arrays of shape (len(bots), 4 tags, n):
    `mean_distance`, `lateral_share` and `npc_win` (0/1), as `run_episodes`
    defines them; average over axes 0 and 2 for one figure per tag.
    """
    # Bot and tag are traced: one compile serves every cell.
    run, default = _fixed_tag_runner(policy, env_id, n)
    key = jax.random.PRNGKey(seed)
    cells = [
        [
            _summary(run(policy_params, default.replace(bot_type=jaxarena.bot_index(bot)), key, jnp.int32(tag)))
            for tag in range(NUM_TAGS)
        ]
        for bot in bots
    ]
    return {
        "mean_distance": np.array([[c["mean_distance"] for c in row] for row in cells]),
        "lateral_share": np.array([[c["lateral_share"] for c in row] for row in cells]),
        "npc_win": np.array([[c["outcome"] == NPC_WIN for c in row] for row in cells], dtype=np.float64),
    }


def paired_gain(per_episode: np.ndarray, tag: int, than: int) -> tuple[float, float]:
    """Mean and standard error of (`tag` - `than`) over paired episodes, averaging the bots first.

    `per_episode` is one of `tag_response`'s (bots, tags, n) arrays.
    """
    gain = (per_episode[:, tag] - per_episode[:, than]).mean(axis=0)
    return float(gain.mean()), float(gain.std(ddof=1) / np.sqrt(gain.size))
