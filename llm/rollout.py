"""Batched evaluation rollouts in which a tag source, such as the LLM, picks the tag every 5 s.

This is `jaxarena.runner.make_runner` with one more kind of tag source: a
`TagSelector`, which the rollout calls once per decision period *for the
whole batch* through one `io_callback`; the selector batches, deduplicates
and caches the prompts on the host. Every way of choosing tags goes through
the same runner, so Combination A, Combination B and any ablation differ
only in the tag source:

    tag source                              use
    --------------------------------------  ------------------------------
    an int, or `fixed_tags(0)`              Combination A (tag 0 throughout)
    a `TagSelector`                         Combination B (the LLM)
    `schedule_tags([0, 1, 2, 3])`           ablations: a fixed rotation
    any jittable `fn(features, prev_tags, done, time_s, key) -> tags`
                                            e.g. a learned selector
"""

from __future__ import annotations

from typing import Any

import jax

from jaxarena.policies import Policy
from jaxarena.runner import RolloutResult, make_runner
from jaxarena.tag_sources import TagFn

from .selector import TagSelector

__all__ = ["make_rollout", "rollout_with_llm"]


def make_rollout(
    env: Any,
    env_params: Any,
    policy: Policy,
    tag_source: TagSelector | TagFn | int = 0,
    num_episodes: int = 100,
    *,
    latency_steps: int = 0,
    initial_tag: int = 0,
    num_periods: int | None = None,
):
    """Builds a jitted `rollout(policy_params, env_params, key) -> RolloutResult`.

    Args:
      env: a `jaxarena.Arena` (as `jaxarena.make` returns).
      policy: jittable `policy(params, obs (5, env.obs_size), key) -> actions (5,)` for
        one arena; it is vmapped over episodes.
      tag_source: see the module docstring.
      num_episodes, latency_steps, num_periods: see `jaxarena.runner.make_runner`.
      initial_tag: the tag every episode starts with (the "previous tag" of the
        first decision).

    The returned function may be called with other env params of the same
    shapes (another bot type) without recompiling. Episode i's keys depend
    only on (key, i): two tag sources run with the same key meet the same spawns.
    """
    if isinstance(tag_source, TagSelector):
        tag_source = tag_source.jax_fn()
    run = make_runner(
        env,
        env_params,
        policy,
        tag_source,
        num_episodes,
        latency_steps=latency_steps,
        num_periods=num_periods,
    )
    return jax.jit(lambda policy_params, params, key: run(policy_params, params, key, initial_tag))


def rollout_with_llm(
    env: Any,
    env_params: Any,
    policy: Policy,
    policy_params: Any,
    key: jax.Array,
    tag_source: TagSelector | TagFn | int,
    num_episodes: int = 100,
    **kwargs: Any,
) -> RolloutResult:
    """Runs `num_episodes` episodes at once with tags from `tag_source`; see `make_rollout`.

    For repeated runs (several bots, A and B) build the function once with
    `make_rollout` to compile once.
    """
    rollout = make_rollout(env, env_params, policy, tag_source, num_episodes, **kwargs)
    return rollout(policy_params, env_params, key)
