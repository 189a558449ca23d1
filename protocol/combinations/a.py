"""Combination A: A's policy with a fixed tag (0 in the paper), the paper's baseline."""

from __future__ import annotations

import dataclasses

from jaxarena.names import NUM_TAGS, TAG_NAMES

from ..combination import Combination, Played
from ..playing import arena, compile_rollout, episodes, timed_call


@dataclasses.dataclass(frozen=True)
class AOptions:
    """policy: A's squad: a checkpoint directory, a shipped policy's name ("A"), "scripted:NAME"
      (`jaxarena.policies.SCRIPTED`) or "coder:NAME" (a white-box baseline, docs/coder.md).
    tag: the tag A holds (0 in the paper); W's squads hold it too.
    """

    policy: str = "A"
    tag: int = 0

    def __post_init__(self):
        if not 0 <= self.tag < NUM_TAGS:
            raise ValueError(f"A's tag must be in [0, {NUM_TAGS}), got {self.tag}")

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--policy-a",
            default=cls.policy,
            metavar="SPEC",
            help="A's policy: run dir, exported policy, or 'A' (shipped, default)",
        )
        group.add_argument(
            "--tag-a",
            type=int,
            choices=range(NUM_TAGS),
            default=cls.tag,
            help="the tag A (and W's squads) hold: "
            + ", ".join(f"{t} {name}" for t, name in enumerate(TAG_NAMES))
            + f" (default {cls.tag}, the paper's)",
        )

    @classmethod
    def from_args(cls, args) -> AOptions:
        return cls(policy=args.policy_a, tag=args.tag_a)


def _squads(context, label: str) -> dict[str, str]:
    return {label: context.config.options_of("A").policy}


def _play(context, label: str, bot: str, key, progress) -> Played:
    c, options = context.config, context.config.options_of("A")
    policy, params = context.resolve(options.policy)[:2]
    # A plays no tag choice: its logged return is the team reward alone, the arena's default.
    env, env_params = arena(context, policy, bot, shaped=False)
    program, compile_s = context.program(
        label, lambda: compile_rollout(context, env, env_params, policy, params, options.tag)
    )
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


def _identity(config) -> dict:
    # The flat names these had before options were grouped: an older command keeps its run id.
    options = config.options_of("A")
    return {"policy_a": options.policy, "tag_a": options.tag}


COMBINATION = Combination(
    name="A",
    about="A's policy with a fixed tag (0: the paper's Combination A)",
    squads=_squads,
    play=_play,
    fingerprint=lambda context, label: {"tag": context.config.options_of("A").tag},
    options=AOptions,
    identity=_identity,
)
