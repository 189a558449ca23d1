"""How a combination plays a cell: its arena, its compiled rollout, its episodes as stored.

Every cell is one vmapped batch of `config.episodes` episodes under one
jitted `jaxarena.runner.make_runner` program (outer scan over decision
periods, inner scan over ticks), on the cell's key: episode i's keys depend
only on (key, i), so every combination meets the same spawns (the paired
design). A program is compiled once per run for its first bot and reused for
the others (`RunContext.program`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .config import cell_key_data
from .policies import policy_env_id, policy_shaping


def arena(context, policy, bot: str, *, shaped: bool, env_id: str | None = None):
    """(env, env_params) of a cell: the policy's arena variant on the run's scenario against `bot`.

    shaped: log the return the policy trained on (its recipe's shaping, `policy_shaping`); a policy
      that plays a fixed tag logs the team reward alone, the arena's default. Outcomes do not depend on it.
    """
    import jaxarena

    shaping = policy_shaping(policy) if shaped else {}
    env_id = env_id or policy_env_id(policy)
    return jaxarena.make(env_id, bot=bot, scenario=context.config.scenario, **shaping)


def compile_rollout(
    context,
    env,
    env_params,
    policy,
    params,
    tag_source,
    *,
    latency_steps: int = 0,
    record_states: bool = False,
    traced_initial_tag: bool = False,
    tag_state: Any = None,
    num_periods: int | None = None,
):
    """(program(policy_params, env_params, key[, initial_tag]) -> RolloutResult, compile s).

    traced_initial_tag: the episodes' initial tag is the program's fourth argument (with
      `hold_tags`, one program plays every held tag).
    tag_state: the tag source's initial carry, passed in as an argument of the program (model
      weights as arguments, not constants baked into it); the returned program binds it.
    num_periods: decision periods to play, where `env_params`' period is not the run's (default the run's).
    """
    import jax

    from jaxarena.runner import make_runner

    c = context.config
    run = make_runner(
        env,
        env_params,
        policy,
        tag_source,
        c.episodes,
        latency_steps=latency_steps,
        num_periods=c.num_periods if num_periods is None else num_periods,
        record_states=record_states,
    )
    args: tuple = (params, env_params, jax.numpy.asarray(cell_key_data(0, "aggressive")))  # shapes only
    if tag_state is not None:
        fn = jax.jit(lambda pp, prm, k, ts: run(pp, prm, k, 0, None, ts))
        args += (tag_state,)
    elif traced_initial_tag:
        fn = jax.jit(lambda pp, prm, k, tag: run(pp, prm, k, tag))
        args += (jax.numpy.int32(0),)
    else:
        fn = jax.jit(lambda pp, prm, k: run(pp, prm, k, 0))
    t = time.perf_counter()
    program = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t
    if tag_state is not None:
        return (lambda pp, prm, k: program(pp, prm, k, tag_state)), compile_s
    return program, compile_s


def timed_call(program, *args) -> tuple[Any, float]:
    """(result, wall s) of one program call, waited for."""
    import jax

    t = time.perf_counter()
    result = jax.block_until_ready(program(*args))
    return result, time.perf_counter() - t


def episodes(result, key, num_episodes: int) -> dict:
    """A batch's episodes as a cell stores them (and `episodes.csv` prints them), rounded for the record."""
    import jax

    episode_keys = np.asarray(jax.random.split(key, num_episodes))
    r = result
    return {
        "episode_key": [f"{int(k[0]):08x}{int(k[1]):08x}" for k in episode_keys],
        "outcome": np.asarray(r.outcome).astype(int).tolist(),
        "duration_s": [round(float(x), 4) for x in np.asarray(r.duration_s)],
        "damage_dealt": [round(float(x), 3) for x in np.asarray(r.damage_dealt)],
        "damage_taken": [round(float(x), 3) for x in np.asarray(r.damage_taken)],
        "team_return": [round(float(x), 5) for x in np.asarray(r.team_return)],
        "tag_steps": np.asarray(r.tag_steps).astype(int).tolist(),
    }


def period_s(env_params) -> float:
    """The decision period in s of concrete env params."""
    from jaxarena.runner import schedule_of

    return schedule_of(env_params)[2]
