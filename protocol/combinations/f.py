"""Combination F: B's policy with each of the four tags held for the whole episode.

One cell per bot holds the four held tags' episode sets ("F0".."F3"), all on
the cell's paired key; one program plays them all, the held tag being its
argument (`hold_tags` keeps the initial tag). The best of them is the
baseline of the oracle's headroom (`o.HEADROOM`).
"""

from __future__ import annotations

from jaxarena.names import NUM_TAGS

from ..combination import Combination, Played
from ..playing import arena, compile_rollout, episodes, timed_call
from . import o


def _squads(context, label: str) -> dict[str, str]:
    return {label: context.config.policy_b}


def _play(context, label: str, bot: str, key, progress) -> Played:
    import jax

    from jaxarena.tag_sources import hold_tags

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(context, env, env_params, policy, params, hold_tags, traced_initial_tag=True),
    )
    sets, wall = [], 0.0
    for tag in range(NUM_TAGS):
        result, seconds = timed_call(program, params, env_params, key, jax.numpy.int32(tag))
        sets.append(episodes(result, key, c.episodes))
        wall += seconds
        progress((tag + 1) * c.episodes // NUM_TAGS)
    return Played({"episodes_by_tag": sets}, compile_s, wall)


COMBINATION = Combination(
    name="F",
    about="B's policy with each tag held all episode",
    squads=_squads,
    play=_play,
    fingerprint=lambda context, label: {"tags": list(range(NUM_TAGS))},
    episode_sets=lambda cell: [(f"F{tag}", e) for tag, e in enumerate(cell["episodes_by_tag"])],
    sections=(o.HEADROOM,),
)
