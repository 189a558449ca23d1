"""Tag sources: what chooses the squad's tag once per decision period, in one protocol.

A tag source is a `TagSource`, three things:

- `init(num_episodes) -> carry`: its own state at a rollout's start (None for
  a source without one);
- `step(carry, features, prev_tags, done, time_s, key, state=None, params=None)
  -> (tags, aux, carry)`, asked once per decision period for the whole batch:
  `features` (N, 5) are the Table 10 state (`llm_features`), `prev_tags` (N,)
  the tags in force, `done` (N,) the episodes already over, `time_s` the game
  time, `key` a key of the source's own stream; `aux` is any pytree of arrays
  to log beside the tags (e.g. the LLM's per-tag probabilities), or None;
- `reads_state`: whether `step` reads the batch's `EnvState` and env params.
  Only a source that declares it gets them: a planner that simulates the arena
  (the counterfactual oracle) or one that reads what a player sees beyond
  Table 10 (the RL selector's decision history). An LLM sees `features`, as a
  player would.

A carried state lets a source remember across periods (the in-graph LLM's
answer cache) and lets large arrays (model weights) enter the compiled program
as arguments rather than constants (`run(..., tag_state=...)`).

`as_tag_source` accepts what callers write: a `TagSource`; an int (the fixed
tag); or a plain jittable `fn(features, prev_tags, done, time_s, key) -> tags`
(or `-> (tags, aux)`), the degenerate case: no carry, no state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: fn(features (N, 5) f32, prev_tags (N,) i32, done (N,) bool, time_s () f32, key) -> tags (N,) i32
#: (or -> (tags, aux pytree)): a plain tag function, the degenerate tag source.
TagFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def _no_carry(num_episodes: int) -> None:
    return None


def _tags_and_aux(out) -> tuple[Any, Any]:
    """A plain function's answer as (tags, aux): it may return tags alone or (tags, aux)."""
    return out if isinstance(out, tuple) and len(out) == 2 else (out, None)


@dataclasses.dataclass(frozen=True)
class TagSource:
    """The one tag-source protocol (see the module docstring): `init`, `step` and `reads_state`."""

    step: Callable[..., tuple]
    init: Callable[[int], Any] = _no_carry
    reads_state: bool = False

    @classmethod
    def of_features(cls, fn: TagFn) -> TagSource:
        """A plain `fn(features, prev_tags, done, time_s, key) -> tags` (or `(tags, aux)`) as a source."""

        def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
            return (*_tags_and_aux(fn(features, prev_tags, done, time_s, key)), carry)

        return cls(step)

    @classmethod
    def of_state(cls, fn: Callable[..., Any]) -> TagSource:
        """`fn(state, params, features, prev_tags, done, time_s, key) -> tags` (or `(tags, aux)`): a
        source without a carry that reads the batch's `EnvState`."""

        def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
            return (*_tags_and_aux(fn(state, params, features, prev_tags, done, time_s, key)), carry)

        return cls(step, reads_state=True)


def as_tag_source(source: TagSource | TagFn | int) -> TagSource:
    """The `TagSource` of what a caller passed: a `TagSource`, an int (the fixed tag) or a plain fn."""
    if isinstance(source, TagSource):
        return source
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        return TagSource.of_features(fixed_tags(int(source)))
    if callable(source):
        return TagSource.of_features(source)
    raise TypeError(
        f"unsupported tag source {source!r}: use an int, a TagSource or a jittable fn(features, prev_tags, done, "
        "time_s, key) -> tags"
    )


def StateTagSource(fn: Callable[..., Any]) -> TagSource:
    """`TagSource.of_state(fn)` under the name earlier code knows it by."""
    return TagSource.of_state(fn)


def CarryTagSource(init: Callable[[int], Any], fn: Callable[..., tuple], reads_state: bool = False) -> TagSource:
    """A source written as `fn(carry, [state, params,] features, prev_tags, done, time_s, key) -> (tags, aux,
    carry)`, the argument order earlier code uses (state and params only with `reads_state`)."""
    if reads_state:

        def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
            return fn(carry, state, params, features, prev_tags, done, time_s, key)

    else:

        def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
            return fn(carry, features, prev_tags, done, time_s, key)

    return TagSource(step, init, reads_state)


def fixed_tags(tag: int) -> TagFn:
    """A tag source that always answers `tag` (Combination A uses 0)."""

    def tag_fn(features, prev_tags, done, time_s, key):
        return jnp.full_like(prev_tags, tag)

    return tag_fn


def frequency_tags(weights: Sequence[float]) -> TagFn:
    """A tag source that draws each episode's tag afresh every decision period, independently, tag t with
    probability weights[t] / sum(weights): a chooser with a taste and no sight of the game."""
    weights = np.asarray(weights, np.float64)
    if weights.ndim != 1 or weights.size < 1 or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"weights must be finite non-negative numbers, one per tag, got {weights.tolist()}")
    if weights.sum() <= 0:
        raise ValueError("weights must not all be 0")
    with np.errstate(divide="ignore"):  # a weight of 0: log 0 = -inf, a tag never drawn
        logits = jnp.asarray(np.log(weights / weights.sum()), jnp.float32)

    def tag_fn(features, prev_tags, done, time_s, key):
        return jax.random.categorical(key, logits, shape=prev_tags.shape).astype(jnp.int32)

    return tag_fn


def hold_tags(features, prev_tags, done, time_s, key) -> jax.Array:
    """A tag source that keeps each episode's tag: the initial tag, possibly traced, for the whole episode."""
    return prev_tags


def schedule_tags(schedule: Sequence[int], period_s: float = 5.0) -> TagFn:
    """A tag source that cycles through `schedule`, one entry per decision period."""
    table = jnp.asarray(schedule, jnp.int32)

    def tag_fn(features, prev_tags, done, time_s, key):
        index = jnp.round(time_s / period_s).astype(jnp.int32) % table.shape[0]
        return jnp.full_like(prev_tags, table[index])

    return tag_fn
