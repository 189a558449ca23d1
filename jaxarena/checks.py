"""Fail-fast argument checks for `reset`/`step` that cost nothing inside a compiled program.

`check_key` and `checked_actions` read only dtypes and shapes, which JAX knows
at trace time, so under `jit` they run once while tracing and leave no
operation in the program. `check_range` and `check_params` look at values
only when they are concrete (a Python number, a numpy array, an eager JAX
array, params closed over or shared by a `vmap`): a traced value is skipped,
so no host round trip and no `jax.debug` callback ever enters a jitted step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .names import BOT_TYPES, NUM_ACTIONS, NUM_NPCS

_HOW = "pass jax.random.key(seed), e.g. jax.random.key(0), or a legacy jax.random.PRNGKey(0) (or a split of one)"


def is_concrete(x) -> bool:
    """True unless `x` is a tracer: its values can be read on the host now."""
    return not isinstance(x, jax.core.Tracer)


def check_key(key, where: str = "key") -> None:
    """TypeError unless `key` is one PRNG key: a typed key (`jax.random.key`) or a legacy uint32 one.

    A batch of keys is a ValueError: vmap the environment over them instead.
    """
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None or shape is None:
        raise TypeError(f"{where} must be a PRNG key, got {type(key).__name__} {key!r}; {_HOW}")
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        batch = tuple(shape)
    elif np.dtype(dtype) == np.uint32 and len(shape) >= 1:
        batch = tuple(shape[:-1])  # legacy raw key: uint32[2] (threefry) or uint32[4] (rbg)
    else:
        raise TypeError(f"{where} must be a PRNG key, got an array of {dtype}{list(shape)}; {_HOW}")
    if batch:
        raise ValueError(f"{where} must be one PRNG key, got a batch of shape {batch}; jax.vmap over the keys instead")


def check_range(x, n: int, what: str) -> None:
    """ValueError naming the valid range if concrete `x` has a value outside 0..n-1; a traced `x` is not checked."""
    if not is_concrete(x):
        return
    value = np.asarray(x)
    if value.size == 0 or not np.issubdtype(value.dtype, np.integer):
        return  # dtype and shape errors are the caller's, with their own messages
    bad = (value < 0) | (value >= n)
    if np.any(bad):
        shown = sorted({int(v) for v in value[bad].reshape(-1)})[:5]
        raise ValueError(f"{what} must be in 0..{n - 1}, got {shown[0] if len(shown) == 1 else shown}")


def checked_actions(actions) -> jax.Array:
    """Reject a wrong shape or dtype at trace time, and a concrete out-of-range value, with a message that helps."""
    raw, actions = actions, jnp.asarray(actions)
    if actions.shape != (NUM_NPCS,):
        raise ValueError(
            f"actions must have shape ({NUM_NPCS},), one per NPC, got {actions.shape}; "
            "for a batch of arenas, jax.vmap env.step"
        )
    if not jnp.issubdtype(actions.dtype, jnp.integer):
        raise TypeError(f"actions must be integers in 0..{NUM_ACTIONS - 1}, got dtype {actions.dtype}")
    check_range(raw, NUM_ACTIONS, "each NPC's action (Table 4)")
    return actions.astype(jnp.int32)


# Fields that must be > 0 (a count, a size or a duration of nothing is meaningless)
# and those that must be >= 0 (0 is a legitimate dummy: a bot that stands still or
# does no damage isolates the other rules in tests and probes).
_POSITIVE = (
    "bot_hp",
    "npc_hp",
    "bot_melee_range",
    "npc_melee_range",
    "orb_range",
    "orb_speed",
    "bot_melee_cooldown",
    "npc_melee_cooldown",
    "orb_cooldown",
    "arena_size",
    "unit_radius",
    "dt",
    "episode_s",
    "decision_period_s",
    "balanced_phase_min_s",
    "balanced_phase_max_s",
    "bot_avoid_distance",
)
_NON_NEGATIVE = ("bot_speed", "npc_speed", "bot_melee_damage", "npc_melee_damage", "orb_damage", "orb_min_range")
#: The params' array fields; every other field is a number.
_ARRAYS = ("boxes", "npc_spawn", "bot_spawn", "bot_weights")
_BOTS = ", ".join(f"{i} ({name})" for i, name in enumerate(BOT_TYPES)) + f" or {len(BOT_TYPES)} (learned)"
#: Params that passed `check_params` lately, by id (held, so no other object can take the id).
_PASSED: dict[int, object] = {}


def _values(params, name: str) -> np.ndarray | None:
    """A number field's values as float64 (any batch shape), or None where they are traced."""
    value = getattr(params, name)
    return np.asarray(value, dtype=np.float64) if is_concrete(value) else None


def _first(values: np.ndarray, bad: np.ndarray):
    return values[bad].reshape(-1)[0].item()


def check_values(params) -> None:
    """Refuse physically meaningless values, naming the field and the rule.

    Every number is finite; HP, ranges, cooldowns, sizes and durations are > 0;
    speeds and damage >= 0 (0 makes a still or harmless dummy); the balanced
    bot's phase bounds need min <= max; `bot_type` is 0..3, `bot_cleave` 0 (off)
    or 1 (on), `shaping_recipe` 0, 1 or 2. A traced field is skipped; a batch
    of values (vmapped params) is checked value by value.
    """
    for name in (f for f in params.__dataclass_fields__ if f not in _ARRAYS):
        value = _values(params, name)
        if value is None:
            continue
        if name in _POSITIVE and not np.all(value > 0.0):
            raise ValueError(f"{name} must be > 0, got {_first(value, ~(value > 0.0))}")
        if name in _NON_NEGATIVE and not np.all(value >= 0.0):
            raise ValueError(f"{name} must be >= 0, got {_first(value, ~(value >= 0.0))}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name} must be finite, got {_first(value, ~np.isfinite(value))}")
    rules = {
        "bot_type": ((0, 1, 2, 3), _BOTS),
        "bot_cleave": ((0, 1), "0 (off) or 1 (on)"),
        "shaping_recipe": ((0, 1, 2), "0 (Table 5, 'paper'), 1 ('intent') or 2 ('obey')"),
    }
    for name, (allowed, words) in rules.items():
        value = _values(params, name)
        if value is not None and not np.all(np.isin(value, allowed)):
            shown = _first(value, ~np.isin(value, allowed))
            raise ValueError(f"{name} must be {words}, got {int(shown) if shown.is_integer() else shown}")
    lo, hi = _values(params, "balanced_phase_min_s"), _values(params, "balanced_phase_max_s")
    if lo is not None and hi is not None and np.any(lo > hi):
        bad = np.broadcast_to(lo > hi, np.broadcast_shapes(lo.shape, hi.shape))
        lo, hi = (_first(np.broadcast_to(v, bad.shape), bad) for v in (lo, hi))
        raise ValueError(f"balanced_phase_min_s ({lo}) must be <= balanced_phase_max_s ({hi})")


def check_params(params) -> None:
    """`check_values` where `reset`/`step` take params: concrete ones are checked, once per params object.

    Params a `jit` or `vmap` traces are skipped (a Python check cannot read them, and nothing enters the
    program); `jaxarena.make` checks its params whole, the layout of the boxes and spawns too.
    """
    if _PASSED.get(id(params)) is params:
        return
    check_values(params)
    if all(is_concrete(leaf) for leaf in jax.tree.leaves(params)):
        if len(_PASSED) >= 64:
            _PASSED.pop(next(iter(_PASSED)))
        _PASSED[id(params)] = params
