"""Combination O: B's policy with the counterfactual oracle choosing the tag.

At every decision the oracle plays each tag out `oracle_rollouts` times with
B's policy from the current state and takes the tag with the highest win rate
(`jaxarena.oracle.oracle_tag_source`): an upper bound on what a tag selector
can gain, not a player. Its section, the headroom (`HEADROOM`), sets O against
A, B and the best fixed tag (F), with B's regret where its decisions are priced.
"""

from __future__ import annotations

import numpy as np

from ..combination import Combination, Played, ReportSection
from ..console import print_oracle
from ..playing import arena, compile_rollout, episodes, timed_call
from ..summary import oracle_summary, uses_oracle
from ..tables import oracle_table


def _squads(context, label: str) -> dict[str, str]:
    return {label: context.config.policy_b}


def _oracle_source(context, label: str, env, env_params, policy, params):
    """The oracle's tag source, reporting each decision period to the cell's progress (through
    `hook`, since the compiled program outlives the cell it was built for)."""
    import jax

    from jaxarena.oracle import oracle_tag_source
    from jaxarena.tag_sources import TagSource

    c = context.config
    oracle = oracle_tag_source(
        env, env_params, policy, params, c.episodes, rollouts=c.oracle_rollouts, horizon_periods=c.num_periods
    ).step
    hook = context.shared(f"{label}.period_hook", lambda: [None])

    def report(time_s, done, tags):
        if hook[0] is not None:
            hook[0](float(time_s), int(np.sum(done)))

    def choose(state, prm, features, prev_tags, done, time_s, key):
        tags, _, _ = oracle(None, features, prev_tags, done, time_s, key, state, prm)
        # `tags` as an argument: the report comes once the period's pricing is done.
        jax.debug.callback(report, time_s, done, tags)
        return tags

    return TagSource.of_state(choose)


def _play(context, label: str, bot: str, key, progress) -> Played:
    from jaxarena.runner import schedule_of

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(
            context, env, env_params, policy, params, _oracle_source(context, label, env, env_params, policy, params)
        ),
    )
    _, periods, period_s = schedule_of(env_params)
    periods = c.num_periods or periods
    hook = context.shared(f"{label}.period_hook", lambda: [None])
    hook[0] = lambda time_s, done: progress(done, **{label: f"period {round(time_s / period_s) + 1}/{periods}"})
    try:
        result, wall = timed_call(program, params, env_params, key)
    finally:
        hook[0] = None
    timing = {"oracle": "in the simulation"}
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall, timing=timing)


#: The headroom: A, B, the best fixed tag (F) and O, and the LLM's regret (priced B decisions).
HEADROOM = ReportSection(
    key="oracle",
    rank=10,
    applies=uses_oracle,
    summarize=lambda r: oracle_summary(r.by, r.descriptive, r.config),
    render=oracle_table,
    console=print_oracle,
)

COMBINATION = Combination(
    name="O",
    about="the oracle picks each tag (slow: minutes per bot)",
    squads=_squads,
    play=_play,
    fingerprint=lambda context, label: {"oracle": {"rollouts": context.config.oracle_rollouts}},
    sections=(HEADROOM,),
)
