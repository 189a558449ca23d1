"""Combination R: B's policy with the tags in a fixed rotation, one tag per decision period.

A tag source that knows nothing of the game: 0, 1, 2, 3, 0, ... every 5 s
(`jaxarena.runner.schedule_tags`), on B's paired episodes. Beside B it says
how much of B's result a schedule without information reaches; its section
(`beside_b`) gives each bot's win % and, where the run has B, the paired difference.
"""

from __future__ import annotations

from jaxarena.names import TAG_NAMES

from ..combination import Combination, Played
from ..playing import arena, compile_rollout, episodes, period_s, timed_call
from .beside_b import beside_b

#: The tags in turn, one per decision period.
ROTATION = (0, 1, 2, 3)


def _play(context, label: str, bot: str, key, progress) -> Played:
    from jaxarena.runner import schedule_tags

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    source = schedule_tags(ROTATION, period_s(env_params))
    program, compile_s = context.program(
        label, lambda: compile_rollout(context, env, env_params, policy, params, source)
    )
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


COMBINATION = Combination(
    name="R",
    about="B's policy with the tags in a fixed rotation (0, 1, 2, 3, ...), one per decision period",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=lambda context, label: {"rotation": list(ROTATION)},
    sections=(
        beside_b(
            "R",
            "rotation",
            f"Rotation (R): B's policy with the tags in turn ({' → '.join(TAG_NAMES[t] for t in ROTATION)}), one per "
            "period",
            rank=40,
            extra={"rotation": [TAG_NAMES[t] for t in ROTATION]},
        ),
    ),
)
