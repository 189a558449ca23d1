"""The arena's knobs a training run may set over its scenario's (`PPOConfig.arena`).

A knob is a scalar `EnvParams` field that changes no shape and no program, so it rides in the runner
state beside the float hyper-parameters (`RunnerState.hyper`, as "arena.NAME") and runs that differ
only in their knobs train in one vmapped program: what a calibration sweep over the arena needs
(`jaxarena-train --sweep arena.bot_hp=300,600`).
"""

from __future__ import annotations

from jaxarena.checks import check_values
from jaxarena.types import EnvParams

#: The knobs. The clock (`dt`, `episode_s`) is left out: episode lengths size the evaluation's programs.
ARENA_KNOBS = (
    "bot_hp",
    "bot_speed",
    "bot_melee_range",
    "bot_melee_damage",
    "bot_melee_cooldown",
    "bot_cleave",
    "npc_hp",
    "npc_speed",
    "npc_melee_range",
    "npc_melee_damage",
    "npc_melee_cooldown",
    "orb_range",
    "orb_speed",
    "orb_damage",
    "orb_cooldown",
    "orb_min_range",
    "balanced_phase_min_s",
    "balanced_phase_max_s",
)
#: How a knob's entry in a runner's `hyper` is named: "arena.bot_hp".
ARENA_PREFIX = "arena."


def arena_pairs(arena) -> tuple[tuple[str, float], ...]:
    """`PPOConfig.arena` as given (a dict, or (name, value) pairs) as sorted pairs of a knob and a finite float."""
    pairs = dict(arena.items() if isinstance(arena, dict) else arena)
    unknown = sorted(set(pairs) - set(ARENA_KNOBS))
    if unknown:
        raise ValueError(f"arena: {unknown} are not arena knobs; the knobs are {', '.join(ARENA_KNOBS)}")
    for name, value in pairs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < float("inf"):
            raise ValueError(f"arena: {name} must be a finite number, got {value!r}")
    if pairs:  # the arena's own rules (HP > 0, ...): the knobs reach it traced, where it cannot check them
        check_values(EnvParams().replace(**pairs))
    return tuple(sorted((name, float(value)) for name, value in pairs.items()))


def arena_knobs_of(hyper: dict) -> dict:
    """The arena knobs among a runner's `hyper` entries, by `EnvParams` field name."""
    return {name.removeprefix(ARENA_PREFIX): v for name, v in hyper.items() if name.startswith(ARENA_PREFIX)}
