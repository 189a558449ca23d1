"""The counterfactual oracle: what each of the four tags is worth in a given state.

From a decision state (an `EnvState` at a 5 s boundary) the oracle branches
the four tags and plays each out `rollouts` times with the same policy,
different keys and the same state, holding the tag, to the episode's end or
for `horizon_periods` decision periods. That gives Q(s, tag): the win
probability and the mean team return (Table 4's reward, without Table 5's
shaping, which pays differently per tag and would not compare). Everything
is the one episode runner started from the given states, so M states cost
one vmapped batch of M x 4 x rollouts episodes.

Two uses:

- `price_states`: regret and agreement for recorded decisions (e.g. every B
  decision of a protocol run, `RolloutResult.decision_states`).
- `oracle_tag_source`: Combination O, a planner that picks argmax Q at
  every boundary. It sees the full state and simulates the future, so it is
  an upper bound on what a tag selector reading the same policy could gain,
  not a player.

Ties are common (every tag wins, or none does), so "best" is the highest
win probability, then the highest mean return among those.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..env import Arena
from ..names import NPC_WIN, NUM_TAGS
from ..runner import Start, make_runner
from ..tag_sources import TagSource, hold_tags
from ..types import EnvParams, EnvState


@struct.dataclass
class TagValues:
    """Q(s, tag) for M states, from `rollouts` playouts per tag.

    win (M, 4): fraction of playouts the squad won (by the horizon).
    ret (M, 4), ret_se (M, 4): mean team return from the state on, and its standard error.
    best (M,) int32: the best tag (highest win, then highest return).
    """

    win: jax.Array
    ret: jax.Array
    ret_se: jax.Array
    best: jax.Array
    rollouts: int = struct.field(pytree_node=False)

    def regret(self, chosen: jax.Array) -> jax.Array:
        """Win probability lost by `chosen` (M,) against the best tag: Q(best) - Q(chosen)."""
        return _pick(self.win, self.best) - _pick(self.win, jnp.asarray(chosen, jnp.int32))

    def agrees(self, chosen: jax.Array) -> jax.Array:
        """Whether `chosen` wins as often as the best tag (zero regret).

        Ties on the win rate count as agreement: the return that breaks them
        for `best` differs between tags by playout noise alone where every tag
        wins (or none does), which is common.
        """
        return self.regret(chosen) <= 0.0

    def win_ci(self, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
        """Wilson interval of each win probability, (low, high), each (M, 4)."""
        return wilson(np.asarray(self.win), self.rollouts, z)


def _pick(values: jax.Array, tags: jax.Array) -> jax.Array:
    """values[m, tags[m]] for each state m."""
    return jnp.take_along_axis(values, tags[:, None], axis=1)[:, 0]


def wilson(p: np.ndarray, n: int, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for success fractions `p` of `n` trials."""
    p = np.asarray(p, np.float64)
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def best_tag(win: jax.Array, ret: jax.Array) -> jax.Array:
    """(M,) argmax of win, ties broken by the mean return."""
    top = win >= win.max(axis=-1, keepdims=True)
    return jnp.argmax(jnp.where(top, ret, -jnp.inf), axis=-1).astype(jnp.int32)


def pricing_params(env_params: EnvParams) -> EnvParams:
    """The params Q is measured under: the same rules, with no shaping in the return."""
    return env_params.replace(shaping_weight=jnp.zeros_like(jnp.asarray(env_params.shaping_weight)))


def make_pricer(
    env: Arena,
    env_params: EnvParams,
    policy: Callable,
    num_states: int,
    *,
    rollouts: int = 16,
    horizon_periods: int | None = None,
) -> Callable[[Any, EnvParams, EnvState, jax.Array], TagValues]:
    """Builds a jitted `price(policy_params, env_params, states, key) -> TagValues`.

    `states` holds `num_states` states (leaves with a leading (M,) axis), each
    at a decision boundary. Playouts are timed from the state (each ends by
    its own clock), so one batch may mix states from different periods. A
    state whose episode is already over is worth its outcome under every tag.
    Episode lengths are read from `env_params` here; `price` may get other
    params of the same shapes (another bot) without recompiling. A branched
    tag acts from the first tick: a reply latency is not modelled.
    """
    if rollouts < 1:
        raise ValueError(f"rollouts must be >= 1, got {rollouts}")
    lanes = num_states * NUM_TAGS * rollouts
    # Up to a full episode: a state from period p finishes by its own clock, and the runner
    # skips the remaining periods once every playout has ended.
    run = make_runner(
        env,
        env_params,
        policy,
        hold_tags,
        lanes,
        num_periods=horizon_periods,
    )
    tags = jnp.tile(jnp.repeat(jnp.arange(NUM_TAGS, dtype=jnp.int32), rollouts), num_states)

    def price(policy_params, params, states: EnvState, key) -> TagValues:
        branched = jax.tree.map(lambda x: jnp.repeat(x, NUM_TAGS * rollouts, axis=0), states)
        result = run(policy_params, pricing_params(params), key, tags, Start(branched, jnp.int32(0)))
        won = (result.outcome == NPC_WIN).astype(jnp.float32).reshape(num_states, NUM_TAGS, rollouts)
        ret = result.team_return.reshape(num_states, NUM_TAGS, rollouts)
        win, mean = won.mean(-1), ret.mean(-1)
        se = ret.std(-1, ddof=1) / math.sqrt(rollouts) if rollouts > 1 else jnp.zeros_like(mean)
        return TagValues(win=win, ret=mean, ret_se=se, best=best_tag(win, mean), rollouts=rollouts)

    return jax.jit(price)


def price_states(
    env: Arena,
    env_params: EnvParams,
    policy: Callable,
    policy_params: Any,
    states: EnvState,
    key: jax.Array,
    *,
    rollouts: int = 16,
    horizon_periods: int | None = None,
    chunk: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> TagValues:
    """Q(s, tag) for any number of states, priced `chunk` states per compiled batch.

    The last chunk is padded with copies of the first state (and the padding is
    dropped), so every chunk reuses one program. Chunk c's key is
    `fold_in(key, c)`. `progress(done, total)` is called after each chunk.
    """
    total = int(jax.tree.leaves(states)[0].shape[0])
    if total == 0:
        raise ValueError("no states to price")
    chunk = min(chunk, total)
    price = make_pricer(env, env_params, policy, chunk, rollouts=rollouts, horizon_periods=horizon_periods)
    parts = []
    for c, start in enumerate(range(0, total, chunk)):
        idx = np.arange(start, start + chunk)
        idx = np.where(idx < total, idx, 0)
        batch = jax.tree.map(lambda x, i=idx: x[i], states)
        values = price(policy_params, env_params, batch, jax.random.fold_in(key, c))
        keep = min(chunk, total - start)
        parts.append(jax.tree.map(lambda x, k=keep: x[:k], values))
        if progress is not None:
            progress(start + keep, total)
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def oracle_tag_source(
    env: Arena,
    env_params: EnvParams,
    policy: Callable,
    policy_params: Any,
    num_episodes: int,
    *,
    rollouts: int = 16,
    horizon_periods: int | None = None,
) -> TagSource:
    """Combination O: at every boundary, each episode takes argmax Q over `rollouts` playouts per tag.

    A tag source for `make_runner(..., tag_source=...)` with `num_episodes`
    episodes; it plays `num_episodes x 4 x rollouts` playouts per decision.
    Ended episodes keep their tag (the runner ignores their answer).
    """
    price = make_pricer(env, env_params, policy, num_episodes, rollouts=rollouts, horizon_periods=horizon_periods)

    def choose(state, params, features, prev_tags, done, time_s, key):
        return price(policy_params, params, state, key).best

    return TagSource.of_state(choose)
