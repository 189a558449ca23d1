"""The helper functions a squad-policy program may call, registered with their signatures and one-line docs.

`HELPERS` is the single source for the sandbox (which names exist and how
many arguments each takes), the translator (what a call computes) and the
language reference (`language.reference_text`), so the three cannot drift.
A helper gets the translation context (this NPC's record, the random key)
and the argument values, and returns a value; all of them are pure.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .values import RECORD, UNITS, LangError, Val, array, boolean, check_constant, num, record, select
from .values import describe as _describe
from .values import to_num as _to_num


@dataclasses.dataclass(frozen=True)
class Helper:
    name: str
    signature: str  # as the reference prints it, e.g. "nearest(units, point=obs.me)"
    doc: str  # one line
    returns: str
    fn: Callable[..., Val]
    min_args: int
    max_args: int | None  # None: any number (min, max)
    cost: int  # about how many JAX ops one call emits: what it weighs in the translation budget


HELPERS: dict[str, Helper] = {}


def _helper(signature: str, returns: str, cost: int = 1):
    """Registers `fn(ctx, *args)`; its docstring's first line is the reference's description."""

    def register(fn):
        name = signature.split("(", 1)[0]
        params = list(inspect.signature(fn).parameters.values())[1:]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        required = sum(p.default is p.empty for p in positional)
        doc = inspect.getdoc(fn).splitlines()[0]
        HELPERS[name] = Helper(name, signature, doc, returns, fn, required, None if varargs else len(positional), cost)
        return fn

    return register


def _num(val: Val, helper: str, arg: str) -> Val:
    try:
        return _to_num(val, f"{helper}: {arg}")
    except LangError:
        raise LangError("type", f"{helper}: {arg} must be a number, got {_describe(val)}") from None


def _xz(val: Val, helper: str, arg: str) -> tuple[Val, Val]:
    if val.kind != RECORD or "x" not in val.v or "z" not in val.v:
        raise LangError("type", f"{helper}: {arg} must be a unit or point (with .x and .z), got {_describe(val)}")
    return val.v["x"], val.v["z"]


def _units(val: Val, helper: str) -> tuple[Val, ...]:
    if val.kind != UNITS:
        raise LangError("type", f"{helper}: expected a list of units such as obs.allies, got {_describe(val)}")
    return val.v


def _math(fn_static, fn_traced, *vals: Val) -> Val:
    if all(v.static for v in vals):
        try:
            return num(check_constant(fn_static(*(v.v for v in vals))))
        except (ValueError, OverflowError) as e:
            raise LangError("runtime", f"math error in a constant expression: {e}") from None
    return num(fn_traced(*(array(v) for v in vals)))


def _distance(a: Val, b: Val, helper: str) -> Val:
    (ax, az), (bx, bz) = _xz(a, helper, "the first argument"), _xz(b, helper, "the second argument")
    dx, dz = array(bx) - array(ax), array(bz) - array(az)
    return num(jnp.sqrt(dx * dx + dz * dz))


@_helper("distance(a, b)", "number", cost=6)
def h_distance(ctx, a, b):
    """Distance in u between two units or points (anything with .x and .z)."""
    return _distance(a, b, "distance(a, b)")


@_helper("bearing(a, b)", "number", cost=3)
def h_bearing(ctx, a, b):
    """Direction from a to b in radians, atan2(b.z - a.z, b.x - a.x): 0 east (+x), PI/2 north (+z)."""
    (ax, az), (bx, bz) = _xz(a, "bearing(a, b)", "a"), _xz(b, "bearing(a, b)", "b")
    return num(jnp.arctan2(array(bz) - array(az), array(bx) - array(ax)))


@_helper("angle_diff(a, b)", "number", cost=13)
def h_angle_diff(ctx, a, b):
    """The angle a - b wrapped into [-PI, PI): how far to turn from b to reach a (positive: counter-clockwise)."""
    a, b = _num(a, "angle_diff(a, b)", "a"), _num(b, "angle_diff(a, b)", "b")
    return _math(
        lambda x, y: math.fmod(math.fmod(x - y + math.pi, 2 * math.pi) + 2 * math.pi, 2 * math.pi) - math.pi,
        lambda x, y: jnp.mod(x - y + jnp.pi, 2.0 * jnp.pi) - jnp.pi,
        a,
        b,
    )


@_helper("in_range(a, b, r)", "true/false", cost=6)
def h_in_range(ctx, a, b, r):
    """Whether a and b (units or points) are at most r u apart."""
    r = _num(r, "in_range(a, b, r)", "r")
    return boolean(_distance(a, b, "in_range(a, b, r)").v <= array(r))


@_helper("can_attack()", "true/false")
def h_can_attack(ctx):
    """Whether this NPC's melee would land now (same as obs.bot.can_attack)."""
    return ctx.obs.v["bot"].v["can_attack"]


@_helper("point(x, z)", "point")
def h_point(ctx, x, z):
    """A point at (x, z) in u, to use with distance, bearing and in_range."""
    return record("a point", x=_num(x, "point(x, z)", "x"), z=_num(z, "point(x, z)", "z"))


def _pick(units: tuple[Val, ...], score: list) -> Val:
    """The unit with the lowest score (ties: the lowest index); scores of dead units are +inf."""
    best, best_score = units[0], score[0]
    for unit, s in zip(units[1:], score[1:], strict=True):
        take = s < best_score
        best, best_score = select(boolean(take), unit, best), jnp.where(take, s, best_score)
    return best


def _alive(unit: Val):
    return array(unit.v["alive"]) if "alive" in unit.v else jnp.asarray(True)


@_helper("nearest(units, point=obs.me)", "unit", cost=90)
def h_nearest(ctx, units, point=None):
    """The living unit of the list nearest to point (default: this NPC); if none is alive, the first (.alive False)."""
    items = _units(units, "nearest(units, point)")
    point = ctx.obs.v["me"] if point is None else point
    score = [
        jnp.where(_alive(u), _distance(point, u, "nearest(units, point)").v, jnp.inf).astype(jnp.float32) for u in items
    ]
    return _pick(items, score)


@_helper("weakest(units)", "unit", cost=65)
def h_weakest(ctx, units):
    """The living unit of the list with the least HP; if none is alive, the first, with .alive False."""
    items = _units(units, "weakest(units)")
    if any("hp" not in u.v for u in items):
        raise LangError("type", "weakest(units): the units have no .hp")
    return _pick(items, [jnp.where(_alive(u), array(u.v["hp"]), jnp.inf) for u in items])


@_helper("count_alive(units)", "number", cost=8)
def h_count_alive(ctx, units):
    """How many units of the list are alive."""
    items = _units(units, "count_alive(units)")
    return num(sum(_alive(u).astype(jnp.float32) for u in items))


@_helper("centroid(units)", "point", cost=35)
def h_centroid(ctx, units):
    """The mean position of the living units of the list; this NPC's position if none is alive."""
    items = _units(units, "centroid(units)")
    alive = [_alive(u).astype(jnp.float32) for u in items]
    count = sum(alive)
    me = ctx.obs.v["me"]
    out = {}
    for axis in ("x", "z"):
        total = sum(a * array(u.v[axis]) for a, u in zip(alive, items, strict=True))
        out[axis] = num(jnp.where(count > 0, total / jnp.maximum(count, 1.0), array(me.v[axis])))
    return record("a point", **out)


@_helper("min(a, b, ...)", "number")
def h_min(ctx, a, b, *more):
    """The smallest of two or more numbers."""
    vals = [_num(v, "min", "every argument") for v in (a, b, *more)]
    return _math(lambda *x: min(x), lambda *x: _reduce(jnp.minimum, x), *vals)


@_helper("max(a, b, ...)", "number")
def h_max(ctx, a, b, *more):
    """The largest of two or more numbers."""
    vals = [_num(v, "max", "every argument") for v in (a, b, *more)]
    return _math(lambda *x: max(x), lambda *x: _reduce(jnp.maximum, x), *vals)


def _reduce(f, xs):
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out


@_helper("abs(x)", "number")
def h_abs(ctx, x):
    """The absolute value of x."""
    return _math(abs, jnp.abs, _num(x, "abs(x)", "x"))


@_helper("clip(x, lo, hi)", "number")
def h_clip(ctx, x, lo, hi):
    """x limited to the range [lo, hi]."""
    vals = [_num(v, "clip(x, lo, hi)", n) for v, n in ((x, "x"), (lo, "lo"), (hi, "hi"))]
    return _math(lambda a, b, c: min(max(a, b), c), lambda a, b, c: jnp.minimum(jnp.maximum(a, b), c), *vals)


@_helper("sqrt(x)", "number")
def h_sqrt(ctx, x):
    """The square root of x (x < 0 gives nan)."""
    return _math(math.sqrt, jnp.sqrt, _num(x, "sqrt(x)", "x"))


@_helper("sin(a)", "number")
def h_sin(ctx, a):
    """The sine of an angle in radians."""
    return _math(math.sin, jnp.sin, _num(a, "sin(a)", "a"))


@_helper("cos(a)", "number")
def h_cos(ctx, a):
    """The cosine of an angle in radians."""
    return _math(math.cos, jnp.cos, _num(a, "cos(a)", "a"))


@_helper("atan2(dz, dx)", "number")
def h_atan2(ctx, dz, dx):
    """The angle in radians of the direction (dx, dz), in [-PI, PI]."""
    return _math(math.atan2, jnp.arctan2, _num(dz, "atan2(dz, dx)", "dz"), _num(dx, "atan2(dz, dx)", "dx"))


@_helper("radians(degrees)", "number")
def h_radians(ctx, degrees):
    """An angle in degrees converted to radians."""
    return _math(math.radians, jnp.deg2rad, _num(degrees, "radians(degrees)", "degrees"))


@_helper("random()", "number", cost=14)
def h_random(ctx):
    """A uniform random number in [0, 1), drawn afresh for each NPC, tick and call."""
    return num(jax.random.uniform(ctx.next_key(), ctx.shape))


def call(ctx: Any, name: str, args: list[Val]) -> Val:
    """Calls helper `name`, with the argument count checked against its signature."""
    h = HELPERS[name]
    if len(args) < h.min_args or (h.max_args is not None and len(args) > h.max_args):
        want = f"{h.min_args}" if h.max_args == h.min_args else f"{h.min_args} or more"
        if h.max_args not in (None, h.min_args):
            want = f"{h.min_args} to {h.max_args}"
        raise LangError("type", f"{h.signature} takes {want} argument(s), got {len(args)}")
    return h.fn(ctx, *args)
