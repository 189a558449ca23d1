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
from jaxarena.analysis.intents import EXTRA_MEASURES, INTENTS, MEASURES, episode_measures
from jaxarena.names import BOT_TYPES, BOT_WIN, NPC_WIN, NUM_TAGS, OUTCOMES, TIMEOUT, tag_index
from jaxarena.policies import Policy
from jaxarena.runner import make_runner
from jaxarena.tag_sources import hold_tags


def _fixed_tag_runner(policy: Policy, env_id: str, n: int, **env_overrides):
    """`run(policy_params, env_params, key, tag)` holding `tag` (traced) for the whole episode."""
    env, params = jaxarena.make(env_id, **env_overrides)
    return make_runner(env, params, policy, hold_tags, n, accumulators={"intents": INTENTS}), params


_PER_BOT_RUNNERS: dict = {}


def play_per_bot(config, policy_params, episodes: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """`episodes` held-out episodes per bot (`BOT_TYPES` order) of the policy `config` trained, sampled as
    trained, from root key `seed`, on the arena it trained on: {bot: {"outcome", "episode_time"}} (n,).
    The runner compiles once per arena, network and episode count, so a batch of runs pays one compile."""
    from .checkpoint import make_policy

    # The knobs a run set over its scenario (`PPOConfig.arena`) are the arena it is judged on too.
    env, params = jaxarena.make(config.env_id, scenario=config.scenario, **dict(config.arena))
    cache_key = (config.env_id, config.scenario, repr(sorted(config.network_kwargs().items())), episodes)
    if cache_key not in _PER_BOT_RUNNERS:
        _PER_BOT_RUNNERS[cache_key] = make_runner(env, params, make_policy(config), hold_tags, episodes)
    run = _PER_BOT_RUNNERS[cache_key]
    played = {}
    for bot in BOT_TYPES:
        result = run(policy_params, params.replace(bot_type=jaxarena.bot_index(bot)), jax.random.PRNGKey(seed))
        played[bot] = {"outcome": np.asarray(result.outcome), "episode_time": np.asarray(result.duration_s)}
    return played


def win_rates(config, policy_params, episodes: int, seed: int) -> dict[str, float]:
    """NPC win rate against each bot of `play_per_bot`'s episodes."""
    played = play_per_bot(config, policy_params, episodes, seed)
    return {bot: float(np.mean(p["outcome"] == NPC_WIN)) for bot, p in played.items()}


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
    the team reward alone unless `shaping_weight=...` adds the shaping), and the intent measures
    (`jaxarena.analysis.intents`): `coverage`, `damage_rate`, `flank_share`, `far_share`,
    `lateral_share` and `distance` (also as `mean_distance`).
    """
    tag = tag_index(tag)
    run, params = _fixed_tag_runner(policy, env_id, n, bot=bot, **env_overrides)
    return _summary(run(policy_params, params, jax.random.PRNGKey(seed), jnp.int32(tag)), params.dt)


def _summary(result, dt: float) -> dict[str, np.ndarray]:
    result = jax.device_get(result)
    measures = jax.device_get(episode_measures(result.extras["intents"], dt))
    return {
        "outcome": result.outcome,
        "episode_time": result.duration_s,
        "damage_dealt": result.damage_dealt,
        "episode_return": result.team_return,
        "mean_distance": measures["distance"],  # distance's older name, kept for its callers
        **measures,
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
    **env_overrides,
) -> dict[str, np.ndarray]:
    """How a Combination B policy plays under each fixed tag, against each bot.

    Every (bot, tag) cell replays the same `n` seeded episodes, so tags are
    compared on paired starts. Returns arrays of shape (len(bots), 4 tags, n):
    the four intent measures (`jaxarena.analysis.intents.MEASURES`), `distance` and
    `lateral_share` (`EXTRA_MEASURES`; distance also as its older name `mean_distance`), `damage_dealt`, `episode_time`
    and `npc_win` (0/1); average over axes 0 and 2 for one figure per tag.
    """
    # Tags are in play: the arena pays B's reward (shaping on, weight 1) unless told otherwise.
    env_overrides.setdefault("shaping_weight", 1.0)
    # Bot and tag are traced: one compile serves every cell.
    run, default = _fixed_tag_runner(policy, env_id, n, **env_overrides)
    key = jax.random.PRNGKey(seed)

    def cell(bot, tag):
        params = default.replace(bot_type=jaxarena.bot_index(bot))
        return _summary(run(policy_params, params, key, jnp.int32(tag)), params.dt)

    cells = [[cell(bot, tag) for tag in range(NUM_TAGS)] for bot in bots]
    keys = ("mean_distance", "damage_dealt", "episode_time", *MEASURES, *EXTRA_MEASURES)
    out = {k: np.array([[c[k] for c in row] for row in cells], dtype=np.float64) for k in keys}
    out["npc_win"] = np.array([[c["outcome"] == NPC_WIN for c in row] for row in cells], dtype=np.float64)
    return out


def paired_gain(per_episode: np.ndarray, tag: int, than: int) -> tuple[float, float]:
    """Mean and standard error of (`tag` - `than`) over paired episodes, averaging the bots first.

    `per_episode` is one of `tag_response`'s (bots, tags, n) arrays.
    """
    gain = (per_episode[:, tag] - per_episode[:, than]).mean(axis=0)
    return float(gain.mean()), float(gain.std(ddof=1) / np.sqrt(gain.size))
