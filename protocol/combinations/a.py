"""Combination A: A's policy with the fixed tag `tag_a` (0 in the paper), the paper's baseline."""

from __future__ import annotations

from ..combination import Combination, Played
from ..playing import arena, compile_rollout, episodes, timed_call


def _squads(context, label: str) -> dict[str, str]:
    return {label: context.config.policy_a}


def _play(context, label: str, bot: str, key, progress) -> Played:
    c = context.config
    policy, params = context.resolve(c.policy_a)[:2]
    # A plays no tag choice: its logged return is the team reward alone, the arena's default.
    env, env_params = arena(context, policy, bot, shaped=False)
    program, compile_s = context.program(
        label, lambda: compile_rollout(context, env, env_params, policy, params, c.tag_a)
    )
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


COMBINATION = Combination(
    name="A",
    about="A's policy with the fixed tag 0, the paper's Combination A",
    squads=_squads,
    play=_play,
    fingerprint=lambda context, label: {"tag": context.config.tag_a},
)
