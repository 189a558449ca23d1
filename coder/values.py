"""The values a squad-policy program computes with, and the typed operations on them.

A value is a number, a true/false value, an action, a record (a unit or a
point, with named fields) or a list of records (`obs.allies`). Numbers and
true/false values are either *static* (Python scalars known while
translating: literals, loop counters, `len`-like counts) or *traced* (JAX
arrays of the batch shape, one entry per NPC). Static values fold, so `range`
bounds, list indices and `if i == 0:` inside an unrolled loop are decided
while translating; traced ones become `jnp.where` selections.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import jax.numpy as jnp

from .limits import MAX_CONSTANT

NUM, BOOL, ACTION, RECORD, UNITS = "num", "bool", "action", "record", "units"


class LangError(Exception):
    """A program error found while translating, before the line is known (the walker adds it)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclasses.dataclass(frozen=True)
class Val:
    """kind: NUM, BOOL, ACTION, RECORD or UNITS; v: a Python scalar or array (NUM/BOOL), an int32 array
    (ACTION), a dict of field values (RECORD) or a tuple of records (UNITS); label names it in messages."""

    kind: str
    v: Any
    label: str = ""

    @property
    def static(self) -> bool:
        return self.kind in (NUM, BOOL) and isinstance(self.v, (bool, int, float))

    def field(self, name: str) -> Val:
        if self.kind != RECORD:
            raise LangError("type", f"{describe(self)} has no field .{name}")
        if name not in self.v:
            fields = ", ".join(sorted(self.v))
            raise LangError("name", f"{self.label or 'this record'} has no field .{name}; its fields: {fields}")
        return self.v[name]


def num(v, label: str = "") -> Val:
    return Val(NUM, v, label)


def boolean(v) -> Val:
    return Val(BOOL, v)


def record(label: str, **fields: Val) -> Val:
    return Val(RECORD, dict(fields), label)


def describe(val: Val) -> str:
    """How an error message names a value's type."""
    if val.kind == RECORD:
        return f"the record {val.label}" if val.label else "a record"
    return {NUM: "a number", BOOL: "a true/false value", ACTION: "an action", UNITS: "a list of units"}[val.kind]


def check_constant(x):
    """A folded constant, refused when it leaves the language's range (so `10**10**10` is an error, not a hang)."""
    if isinstance(x, float) and not math.isfinite(x):
        raise LangError("limit", "a constant expression is not finite (overflow or 0/0)")
    if not isinstance(x, bool) and abs(x) > MAX_CONSTANT:
        raise LangError("limit", f"a constant expression exceeds {MAX_CONSTANT:,} in magnitude")
    return x


def array(val: Val):
    """The traced array of a number or true/false value (static ones become float32/bool scalars)."""
    if val.kind == NUM:
        return jnp.asarray(val.v, jnp.float32)
    if val.kind == BOOL:
        return jnp.asarray(val.v, bool)
    raise LangError("type", f"expected a number, got {describe(val)}")


def to_num(val: Val, what: str = "this operand") -> Val:
    """A number from a number or a true/false value (True is 1), else a type error naming `what`."""
    if val.kind == NUM:
        return val
    if val.kind == BOOL:
        return num(int(val.v) if val.static else jnp.asarray(val.v, jnp.float32))
    raise LangError("type", f"{what} must be a number, got {describe(val)}")


def truth(val: Val, what: str = "a condition") -> Val:
    """A true/false value from a true/false value or a number (nonzero is true)."""
    if val.kind == BOOL:
        return val
    if val.kind == NUM:
        return boolean(val.v != 0 if val.static else jnp.asarray(val.v) != 0)
    raise LangError("type", f"{what} must be a number or true/false value, got {describe(val)}")


_ARITH = {
    "+": (operator.add, jnp.add),
    "-": (operator.sub, jnp.subtract),
    "*": (operator.mul, jnp.multiply),
    "/": (operator.truediv, jnp.true_divide),
    "//": (operator.floordiv, jnp.floor_divide),
    "%": (operator.mod, jnp.mod),
    "**": (None, jnp.power),
}


def arith(op: str, a: Val, b: Val) -> Val:
    a, b = to_num(a, f"the left operand of {op}"), to_num(b, f"the right operand of {op}")
    if a.static and b.static:
        return num(check_constant(_fold(op, a.v, b.v)))
    return num(_ARITH[op][1](array(a), array(b)))


def _fold(op: str, x, y):
    if op in ("/", "//", "%") and y == 0:
        raise LangError("runtime", "division by zero in a constant expression")
    if op == "**":
        # Floats, so a huge power overflows (an error) instead of building a giant integer.
        try:
            r = math.pow(float(x), float(y))
        except (OverflowError, ValueError) as e:
            raise LangError("limit", f"constant power {x} ** {y} is out of range") from e
        return int(r) if isinstance(x, int) and isinstance(y, int) and y >= 0 else r
    return _ARITH[op][0](x, y)


def negate(a: Val) -> Val:
    a = to_num(a, "the operand of unary -")
    return num(-a.v) if a.static else num(-array(a))


_COMPARE = {
    "<": (operator.lt, jnp.less),
    "<=": (operator.le, jnp.less_equal),
    ">": (operator.gt, jnp.greater),
    ">=": (operator.ge, jnp.greater_equal),
    "==": (operator.eq, jnp.equal),
    "!=": (operator.ne, jnp.not_equal),
}


def compare(op: str, a: Val, b: Val) -> Val:
    if ACTION in (a.kind, b.kind):
        if a.kind != b.kind or op not in ("==", "!="):
            raise LangError("type", f"an action can only be compared with == or != to another action, not {op}")
        return boolean(_COMPARE[op][1](a.v, b.v))
    a, b = to_num(a, f"the left side of {op}"), to_num(b, f"the right side of {op}")
    if a.static and b.static:
        return boolean(bool(_COMPARE[op][0](a.v, b.v)))
    return boolean(_COMPARE[op][1](array(a), array(b)))


def logical(op: str, a: Val, b: Val) -> Val:
    """`and`/`or` as elementwise logic: both sides are evaluated (the language has no side effects)."""
    a, b = truth(a, f"an operand of {op}"), truth(b, f"an operand of {op}")
    if a.static and b.static:
        return boolean((a.v and b.v) if op == "and" else (a.v or b.v))
    if a.static or b.static:  # fold the static side: True and x == x, False and x == False, ...
        s, t = (a, b) if a.static else (b, a)
        if op == "and":
            return t if s.v else boolean(False)
        return boolean(True) if s.v else t
    f = jnp.logical_and if op == "and" else jnp.logical_or
    return boolean(f(a.v, b.v))


def logical_not(a: Val) -> Val:
    a = truth(a, "the operand of not")
    return boolean(not a.v) if a.static else boolean(jnp.logical_not(a.v))


def select(cond: Val, a: Val, b: Val, what: str = "the two branches") -> Val:
    """`a` where `cond` holds, else `b`, for values of one type (numbers and true/false values mix as numbers)."""
    cond = truth(cond)
    if cond.static:
        return a if cond.v else b
    if a.kind != b.kind and {a.kind, b.kind} <= {NUM, BOOL}:
        a, b = to_num(a), to_num(b)
    if a.kind != b.kind:
        raise LangError("type", f"{what} give different types: {describe(a)} and {describe(b)}")
    if a.kind == RECORD:
        if set(a.v) != set(b.v):
            raise LangError("type", f"{what} give different records: {a.label} and {b.label}")
        label = a.label if a.label == b.label else "a unit"
        return Val(RECORD, {k: select(cond, a.v[k], b.v[k], what) for k in a.v}, label)
    if a.kind == UNITS:
        if len(a.v) != len(b.v):
            raise LangError("type", f"{what} give lists of different lengths")
        return Val(UNITS, tuple(select(cond, x, y, what) for x, y in zip(a.v, b.v, strict=True)), a.label)
    if a.static and b.static and a.v == b.v and type(a.v) is type(b.v):
        return a
    dtype = {NUM: jnp.float32, BOOL: bool, ACTION: jnp.int32}[a.kind]
    return Val(a.kind, jnp.where(cond.v, jnp.asarray(a.v, dtype), jnp.asarray(b.v, dtype)), a.label)
