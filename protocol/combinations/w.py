"""Combination W: the white-box squads, baselines written in the squad-policy language (docs/coder.md).

Each baseline (`jaxarena.coder.language.BASELINES`: rush, kite,
surround_strike) is a squad of its own, translated to JAX and played as A is
(A's fixed tag, the team reward) on A's paired episodes: one program per
squad, and one cell per bot that holds every squad's episode set ("W:rush", ...).
"""

from __future__ import annotations

from ..combination import Combination, Played, ReportSection
from ..console import print_whitebox
from ..playing import arena, compile_rollout, episodes, timed_call
from ..policies import DEFAULT_ENV_ID
from ..summary import whitebox_summary
from ..tables import whitebox_table


def specs() -> dict[str, str]:
    """W's squads: baseline name -> its policy spec ("coder:rush", ...; see `policies.resolve_policy`)."""
    from jaxarena.coder.language import BASELINES

    return {name: f"coder:{name}" for name in BASELINES}


def _squads(context, label: str) -> dict[str, str]:
    return {f"{label}:{name}": spec for name, spec in specs().items()}


def _fingerprint(context, label: str) -> dict:
    # Every squad's checksum: editing a baseline invalidates the cell.
    return {"policy": {name: context.resolve(spec)[2] for name, spec in specs().items()}, "tag": context.config.tag_a}


def _play(context, label: str, bot: str, key, progress) -> Played:
    c = context.config
    # The squad-policy language reads Arena-v0's observation; no tag choice, so no shaping is logged.
    env, env_params = arena(context, None, bot, shaped=False, env_id=DEFAULT_ENV_ID)
    programs, compile_s = {}, 0.0
    for name, spec in specs().items():
        policy, params = context.resolve(spec)[:2]
        programs[name], seconds = context.program(
            f"{label}:{name}",
            lambda policy=policy, params=params: compile_rollout(context, env, env_params, policy, params, c.tag_a),
        )
        compile_s += seconds
    sets, wall = {}, 0.0
    for i, (name, program) in enumerate(programs.items()):
        result, seconds = timed_call(program, context.resolve(specs()[name])[1], env_params, key)
        sets[name] = episodes(result, key, c.episodes)
        wall += seconds
        progress((i + 1) * c.episodes // len(programs))
    return Played({"episodes_by_squad": sets}, compile_s, wall)


#: Each squad against A on the same paired episodes.
WHITEBOX = ReportSection(
    key="whitebox",
    rank=20,
    applies=lambda config: "W" in config.combinations,
    summarize=lambda r: whitebox_summary(r.by, r.descriptive, r.config),
    render=whitebox_table,
    console=print_whitebox,
)

COMBINATION = Combination(
    name="W",
    about="the white-box baselines of docs/coder.md (rush, kite, surround_strike) on A's paired episodes",
    squads=_squads,
    play=_play,
    fingerprint=_fingerprint,
    episode_sets=lambda cell: [(f"W:{name}", e) for name, e in cell["episodes_by_squad"].items()],
    sections=(WHITEBOX,),
)
