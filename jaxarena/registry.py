"""`jaxarena.make`: build an environment by id, with named bots and checked overrides."""

from __future__ import annotations

import dataclasses
import importlib

import jax.numpy as jnp
import numpy as np

from .checks import check_values
from .env import Arena
from .learned_bot import check_bot_weights
from .names import BOT_LEARNED, bot_index
from .scenarios import DEFAULT_SCENARIO, scenario_overrides
from .types import EnvParams

# "ArenaFacing-v0" is the same arena with the bot's facing appended to each
# observation (obs_size 25), "ArenaFormation-v0" with the facing and the active
# tag's formation slot (obs_size 28), "ArenaFormation-v2" the same with Flank's
# slot at the bot's nearer side; see `Arena.__init__`.
#: env id -> what its `Arena` adds to the paper's observation (see `make`).
OBSERVATIONS = {
    "Arena-v0": {},
    "ArenaFacing-v0": {"observe_facing": True},
    "ArenaFormation-v0": {"observe_formation": True},
    # ArenaFormation-v0 with Flank's slot at the bot's nearer side, 6 u off it (`formations.nearer_sides`).
    "ArenaFormation-v2": {"observe_formation": True, "flank_sides": True},
}
#: The NPC-side arena variants: what a squad policy trains and plays on.
ARENA_IDS = tuple(OBSERVATIONS)
#: Environments built around an arena and a frozen squad: id -> "module:builder". Their builders load
#: trained squads, so they sit in layers above the core (docs/layout.md, "Layers"): named here, not
#: imported, and loaded on first use, so the arena's import pulls in neither the checkpoint loader nor
#: the LLM's tables.
BUILT_AROUND_SQUAD = {
    # The learned bot's side (`jaxarena.bot_arena.BotArena`, one unbatched arena).
    "BotArena-v0": "jaxarena.bot_arena:make_bot_arena",
    # The selector's 5 s decision MDP (`jaxarena.selector.decision_env.DecisionEnv`, one unbatched lane).
    "SelectorDecision-v0": "jaxarena.selector.decision_env:make_decision_env",
}
#: Every id `make` builds.
REGISTERED_IDS = ARENA_IDS + tuple(BUILT_AROUND_SQUAD)
_ARRAY_FIELDS = {"boxes": (None, 4), "npc_spawn": (4,), "bot_spawn": (4,)}


def make(env_id: str = "Arena-v0", bot: str | int | None = None, scenario: str = DEFAULT_SCENARIO, **overrides):
    """Create an environment and its default params.

    Every environment has gymnax's interface: `reset(key, params)`,
    `step(key, state, action, params)` (auto-resetting), `name`,
    `default_params`, `observation_space(params)`, `action_space(params)`.

    Args:
        env_id: one of `REGISTERED_IDS`. The arena variants (`ARENA_IDS`):
            "Arena-v0" (the paper's 23-float
            observation), "ArenaFacing-v0" (plus the bot's facing, 25 floats),
            "ArenaFormation-v0" (plus the facing and the tag's formation
            slot for each NPC, 28 floats; `jaxarena.formations`) or
            "ArenaFormation-v2" (ArenaFormation-v0 with Flank's slot at the bot's nearer
            side, 6 u off it). Built around a frozen squad, which they need
            as `squad=` (a shipped policy's name such as "B-paper", a run
            directory, or a `(policy, params)` pair): "BotArena-v0", the
            learned bot's side (`jaxarena.bot_arena.make_bot_arena`), and
            "SelectorDecision-v0", the selector's decision-level env
            (`jaxarena.selector.decision_env.make_decision_env`); their
            builders list their other options.
        bot: "aggressive", "evasive" or "balanced" (or its index); default balanced.
            "learned" (or `BOT_LEARNED`, 3) is the learned bot, which needs
            `bot_weights` (`jaxarena.learned_bot.init_bot_weights` or a
            checkpoint of `jaxarena.algorithms.bot_training.train_bot`).
        scenario: a preset of `jaxarena.scenarios.SCENARIOS`; default "paper"
            (the paper's arena). Explicit overrides win over the preset's.
        **overrides: any `EnvParams` field, e.g. `episode_s=60.0`.

    The default reward is the team reward alone; pass `shaping_weight=1.0`
    to add Table 5's shaping for the active tag.

    Raises ValueError/TypeError with the valid choices on an unknown id,
    scenario, bot name or field, on a value of the wrong type or shape, and
    on a physically meaningless value (see `check_values`).
    """
    if env_id in BUILT_AROUND_SQUAD:
        module, builder = BUILT_AROUND_SQUAD[env_id].split(":")
        return getattr(importlib.import_module(module), builder)(bot=bot, scenario=scenario, **overrides)
    if env_id not in REGISTERED_IDS:
        raise ValueError(f"unknown env id {env_id!r}; registered ids: {', '.join(REGISTERED_IDS)}")
    if bot is not None:
        if "bot_type" in overrides:
            raise TypeError("pass either bot= or bot_type=, not both")
        overrides["bot_type"] = bot_code(bot)
    params = EnvParams(**_checked_overrides({**scenario_overrides(scenario), **overrides}))
    check_values(params)
    if int(params.bot_type) == BOT_LEARNED and params.bot_weights is None:
        raise ValueError(
            "the learned bot (bot_type 3) needs bot_weights: pass bot_weights=init_bot_weights(key) "
            "(jaxarena.learned_bot) or a checkpoint from jaxarena.algorithms.bot_training.train_bot"
        )
    check_geometry(params)
    return arena_for(env_id, params, scenario), params


def arena_for(env_id: str, params: EnvParams, scenario: str = DEFAULT_SCENARIO) -> Arena:
    """The `Arena` of an arena id over already-built `params` (no checks: `make` checks)."""
    if env_id not in OBSERVATIONS:
        raise ValueError(f"unknown arena id {env_id!r}; arena ids: {', '.join(ARENA_IDS)}")
    return Arena(params, scenario=scenario, **OBSERVATIONS[env_id])


def _checked_overrides(overrides: dict) -> dict:
    fields = {f.name for f in dataclasses.fields(EnvParams)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown EnvParams field(s) {unknown}; valid fields: {sorted(fields)}")
    checked = {}
    for name, value in overrides.items():
        if name in _ARRAY_FIELDS:
            array = np.asarray(value, dtype=np.float32)
            want = _ARRAY_FIELDS[name]
            if array.ndim != len(want) or any(w is not None and w != s for w, s in zip(want, array.shape, strict=True)):
                raise ValueError(f"{name} must have shape {want} (None: any), got {array.shape}")
            checked[name] = jnp.asarray(array)
        elif name == "bot_type":
            checked[name] = bot_code(value)
        elif name == "bot_weights":
            checked[name] = None if value is None else check_bot_weights(value)
        else:
            array = np.asarray(value) if not isinstance(value, (str, bytes, bool)) else None
            if array is None or array.ndim != 0 or not np.issubdtype(array.dtype, np.number):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not np.isfinite(array):
                raise ValueError(f"{name} must be finite, got {value}")
            checked[name] = float(array)
    return checked


def bot_code(bot: str | int) -> int:
    """The `bot_type` of a scripted bot's name or code, or of the learned bot ("learned" or 3)."""
    if bot == "learned" or (isinstance(bot, (int, np.integer)) and not isinstance(bot, bool) and bot == BOT_LEARNED):
        return BOT_LEARNED
    try:
        return bot_index(bot)
    except ValueError as exc:
        raise ValueError(f"{exc}; or 'learned' ({BOT_LEARNED}) for the learned bot, with bot_weights") from None


def check_geometry(params: EnvParams) -> None:
    """Refuse layouts the one-pass collision rule cannot resolve exactly.

    Needs at least one box, each with min < max; no unit moving farther than
    its radius in one tick; boxes more than a unit's diameter from the walls
    and more than two units' reach in a tick (2 x (radius + step)) from each
    other, so at most one box constrains a move; and spawn zones inside the
    walls and clear of every box.
    """
    boxes = np.asarray(params.boxes, dtype=np.float64)
    size, r = float(params.arena_size), float(params.unit_radius)
    gap = 2.0 * r
    if boxes.shape[0] == 0:
        raise ValueError("boxes must hold at least one box")
    if np.any(boxes[:, :2] >= boxes[:, 2:]):
        raise ValueError("every box needs x_min < x_max and z_min < z_max")
    if np.any(boxes[:, :2] <= gap) or np.any(boxes[:, 2:] >= size - gap):
        raise ValueError(f"boxes must keep more than {gap} u from the walls")
    fastest = max(float(params.npc_speed), float(params.bot_speed)) * float(params.dt)
    if fastest > r:
        raise ValueError(f"units move {fastest} u per tick, more than their radius {r}: lower dt or speeds")
    # Within one tick a disc reaches r + its step from its centre; two boxes
    # farther apart than twice that never both constrain one move.
    reach = 2.0 * (r + fastest)
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            if _box_gap(boxes[i], boxes[j]) <= max(gap, reach):
                raise ValueError(f"boxes {i} and {j} are closer than two units' reach in a tick ({reach} u)")
    for name in ("npc_spawn", "bot_spawn"):
        zone = np.asarray(getattr(params, name), dtype=np.float64)
        if np.any(zone[:2] > zone[2:]) or np.any(zone[:2] < r) or np.any(zone[2:] > size - r):
            raise ValueError(f"{name} must have min <= max and lie inside the walls (at least {r} u in)")
        if any(_box_gap(zone, box) <= r for box in boxes):
            raise ValueError(f"{name} must stay more than {r} u from every box")


def _box_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Distance between two axis-aligned boxes (0 if they touch or overlap)."""
    dx = max(a[0] - b[2], b[0] - a[2], 0.0)
    dz = max(a[1] - b[3], b[1] - a[3], 0.0)
    return float(np.hypot(dx, dz))


def make_jaxmarl(env_id: str = "Arena-v0", bot: str | int | None = None, world_state: bool = False, **overrides):
    """The arena behind JaxMARL's `MultiAgentEnv` interface (params bound).

    Drop-in for `jaxmarl.make(...)` in JaxMARL's IPPO/MAPPO baselines.
    """
    from .wrappers import MultiAgentArena

    if env_id not in ARENA_IDS:
        raise ValueError(f"make_jaxmarl serves the arena variants {', '.join(ARENA_IDS)}, got {env_id!r}")
    env, params = make(env_id, bot=bot, **overrides)
    return MultiAgentArena(env, params, world_state=world_state)
