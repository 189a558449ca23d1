"""Batched evaluation of a policy: one episode per arena, outcome and tactics per episode.

    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.algorithms.evaluation import run_episodes, wilson_interval
    policy, params = load_policy("A", greedy=True)
    res = run_episodes(lambda obs, key: policy(params, obs, key), "aggressive", n=1000)

Each of the `n` arenas runs exactly its first episode (the scan covers the
longest possible episode; later, auto-reset episodes are ignored). The tag
is fixed for the whole episode (`tag`), e.g. to test a Combination B policy's
response to each tag.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.observe import with_tag
from jaxarena.physics import norm
from jaxarena.rewards import bearing_cos_sin
from jaxarena.types import NUM_TAGS, ticks


def focus_fire_policy(obs: jax.Array, key=None) -> jax.Array:
    """Scripted reference squad: every NPC walks at the bot and melees when it can.

    Reads only the observation: obs[..., 7] is the can-melee flag (Table 3).
    """
    return jnp.where(obs[..., 7] > 0.5, 3, 0).astype(jnp.int32)


def chase_and_orb_policy(obs: jax.Array, key, fire_prob: float = 0.8, orb_reach: float = 11.0) -> jax.Array:
    """Scripted reference that also uses orbs: melee when possible; otherwise,
    within `orb_reach` u of the bot, fire an orb with probability `fire_prob`
    (the orb cooldown is not observable, and firing on cooldown wastes the
    tick, hence a random mix), else walk at the bot.
    """
    d = obs[..., 6] * jnp.sqrt(2.0) * 30.0  # obs[6] = distance / d_max (default 30x30 arena)
    fire = (d < orb_reach) & (jax.random.uniform(key, d.shape) < fire_prob)
    return jnp.where(obs[..., 7] > 0.5, 3, jnp.where(fire, 5, 0)).astype(jnp.int32)


def random_policy(obs: jax.Array, key) -> jax.Array:
    """Uniform random actions (a floor for comparisons)."""
    return jax.random.randint(key, obs.shape[:-1], 0, jaxarena.NUM_ACTIONS, dtype=jnp.int32)


def run_episodes(
    act: Callable[[jax.Array, jax.Array], jax.Array],
    bot: str | int,
    n: int = 1000,
    seed: int = 0,
    tag: int = 0,
    env_id: str = "Arena-v0",
    **env_overrides,
) -> dict[str, np.ndarray]:
    """Play `n` seeded episodes in parallel with `act(obs (n,5,obs_size), key) -> (n,5) actions`.

    `env_id` picks the observation: a policy trained on "ArenaFacing-v0"
    (`policy.env_id`) needs it here too.

    Returns numpy arrays of shape (n,): `outcome` (1 NPC win, 2 bot win,
    3 timeout), `episode_time` (s), `damage_dealt` (HP the squad took off
    the bot), `episode_return` (rewards summed, averaged over the 5 NPCs;
    the shaping follows `shaping_weight`), `mean_distance` (NPC-bot distance in u,
    averaged over living NPC-ticks) and `lateral_share` (share of living
    NPC-ticks in the bot's lateral arcs, 60 < |theta| < 120 degrees).
    """
    env, params = jaxarena.make(env_id, bot=bot, **env_overrides)
    play = _episode_player(act, env, n, int(ticks(params.episode_s, params.dt)) + 1)
    # params and tag as compile-time constants: the program (and its float results) as it always was.
    return _summary(jax.jit(lambda key: play(key, params, jnp.int32(tag)))(jax.random.PRNGKey(seed)))


def _episode_player(act, env, n: int, max_ticks: int):
    """`play(key, params, tag) -> per-episode sums`, to be jitted by the caller."""

    def play(key, params, tag):
        k_reset, k_run = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)
        state = jax.vmap(env.set_tag)(state, jnp.full((n,), tag, jnp.int32))
        obs = with_tag(obs, tag)

        def body(carry, key):
            obs, state, live, acc = carry
            k_act, k_step = jax.random.split(key)
            actions = act(obs, k_act)
            alive = (state.npc_hp > 0.0) & live[:, None]
            dist = norm(state.npc_pos - state.bot_pos[:, None, :])
            cos, _ = jax.vmap(bearing_cos_sin)(state.npc_pos, state.bot_pos, state.bot_facing)
            acc = dict(acc)
            acc["ticks"] += jnp.sum(alive, -1)
            acc["dist"] += jnp.sum(jnp.where(alive, dist, 0.0), -1)
            acc["lateral"] += jnp.sum(alive & (jnp.abs(cos) < 0.5), -1)
            obs, state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, n), state, actions, params
            )
            acc["ret"] += jnp.where(live, jnp.mean(reward, -1), 0.0)
            acc["damage"] += jnp.where(live, jnp.sum(info["damage_dealt"], -1), 0.0)
            first = live & done
            acc["outcome"] = jnp.where(first, info["outcome"], acc["outcome"])
            acc["time"] = jnp.where(first, info["episode_time"], acc["time"])
            return (obs, state, live & ~done, acc), None

        acc = {
            "ticks": jnp.zeros(n, jnp.int32),
            "dist": jnp.zeros(n),
            "lateral": jnp.zeros(n, jnp.int32),
            "outcome": jnp.zeros(n, jnp.int32),
            "time": jnp.zeros(n),
            "damage": jnp.zeros(n),
            "ret": jnp.zeros(n),
        }
        (_, _, _, acc), _ = jax.lax.scan(body, (obs, state, jnp.ones(n, bool), acc), jax.random.split(k_run, max_ticks))
        return acc

    return play


def _summary(acc) -> dict[str, np.ndarray]:
    acc = jax.device_get(acc)
    live_ticks = np.maximum(acc["ticks"], 1)
    return {
        "outcome": acc["outcome"],
        "episode_time": acc["time"],
        "damage_dealt": acc["damage"],
        "episode_return": acc["ret"],
        "mean_distance": acc["dist"] / live_ticks,
        "lateral_share": acc["lateral"] / live_ticks,
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
    for code, name in ((1, "npc_win"), (2, "bot_win"), (3, "timeout")):
        k = int(np.sum(outcome == code))
        lo, hi = wilson_interval(k, n)
        out[name] = {"rate": k / n, "lo": lo, "hi": hi, "count": k}
    out["n"] = n
    return out


def tag_response(
    act: Callable[[jax.Array, jax.Array], jax.Array],
    bots: tuple[str, ...] = ("aggressive", "evasive", "balanced"),
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
    env, default = jaxarena.make(env_id)
    # params and tag are traced: one compile serves every cell.
    play = jax.jit(_episode_player(act, env, n, int(ticks(default.episode_s, default.dt)) + 1))
    key = jax.random.PRNGKey(seed)
    cells = []
    for bot in bots:
        params = default.replace(bot_type=jaxarena.bot_index(bot))
        cells.append([_summary(play(key, params, jnp.int32(tag))) for tag in range(NUM_TAGS)])
    return {
        "mean_distance": np.array([[c["mean_distance"] for c in row] for row in cells]),
        "lateral_share": np.array([[c["lateral_share"] for c in row] for row in cells]),
        "npc_win": np.array([[c["outcome"] == 1 for c in row] for row in cells], dtype=np.float64),
    }


def paired_gain(per_episode: np.ndarray, tag: int, than: int) -> tuple[float, float]:
    """Mean and standard error of (`tag` - `than`) over paired episodes, averaging the bots first.

    `per_episode` is one of `tag_response`'s (bots, tags, n) arrays.
    """
    gain = (per_episode[:, tag] - per_episode[:, than]).mean(axis=0)
    return float(gain.mean()), float(gain.std(ddof=1) / np.sqrt(gain.size))
