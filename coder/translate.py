"""The translator: a checked squad-policy program becomes a jittable JAX policy, by walking its AST.

`translate(source)` returns `policy(params, obs, key) -> actions`: obs is
(..., 5, 23) (Table 3 of `Arena-v0`), actions int32 of shape obs.shape[:-1].
The program is written from one NPC's point of view; the translation is
vectorised over every leading axis, so all NPCs of all arenas are computed
by the same elementwise ops (the same as vmapping it per NPC).

Control flow becomes data flow. Each block runs with a *flow*: its variables,
a `done` mask (the NPCs whose program has already returned) and their
`result`. A `return` stores its action where not yet done and marks all
done; an `if` on a traced condition runs both branches from the same flow
and merges them with `jnp.where` (variables, done, result); an `if` on a
static condition (a loop counter, a constant) runs only its branch. Loops
over `range(N)` (N static) and over `obs.allies` are unrolled; calls to the
program's own functions are inlined. Nothing in the source is executed.
"""

from __future__ import annotations

import ast
import dataclasses

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core

from jaxarena.names import NUM_NPCS, NUM_TAGS
from jaxarena.policies import Policy
from jaxarena.types import OBS_SIZE

from . import limits
from .helpers import HELPERS, call
from .language import ACTIONS, CONSTANTS
from .program_error import ProgramError, error_at
from .sandbox import check_program
from .values import (
    ACTION,
    UNITS,
    LangError,
    Val,
    arith,
    boolean,
    compare,
    describe,
    logical,
    logical_not,
    negate,
    num,
    record,
    select,
    to_num,
    truth,
)

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_ACTION_LIST = ", ".join(ACTIONS)


def observation_record(obs: jax.Array) -> Val:
    """The `obs` record of the language from the (..., 5, 23) Table 3 observation, in arena units.

    The scales are the default `Arena-v0` ones (docs/arena.md): positions x 30, NPC HP x 60, bot HP x 300,
    distances x the diagonal 30 sqrt 2 (computed as `types.arena_diagonal` does, so thresholds on it agree
    bit for bit with the scripted squads').
    """
    from .language import _DEFAULTS

    size = jnp.float32(_DEFAULTS["arena_size"])
    d_max = jnp.asarray(_DEFAULTS["arena_size"], jnp.float32) * jnp.sqrt(2.0).astype(jnp.float32)
    npc_hp, bot_hp = jnp.float32(_DEFAULTS["npc_hp"]), jnp.float32(_DEFAULTS["bot_hp"])
    col = lambda i: obs[..., i]  # noqa: E731
    index = jnp.broadcast_to(jnp.arange(NUM_NPCS, dtype=jnp.float32), obs.shape[:-1])
    mx, mz = col(0) * size, col(1) * size

    def dist(x, z):
        return num(jnp.sqrt((x - mx) ** 2 + (z - mz) ** 2))

    me = record("obs.me", x=num(mx), z=num(mz), hp=num(col(2) * npc_hp), alive=boolean(col(2) > 0.0))
    bot = record(
        "obs.bot",
        x=num(col(3) * size),
        z=num(col(4) * size),
        hp=num(col(5) * bot_hp),
        distance=num(col(6) * d_max),
        can_attack=boolean(col(7) > 0.5),
        alive=boolean(col(5) > 0.0),
    )
    cx, cz = col(8) * size, col(9) * size
    cover = record("obs.cover", x=num(cx), z=num(cz), distance=dist(cx, cz))
    allies = []
    for j in range(NUM_NPCS - 1):
        ax, az, ahp = col(10 + 3 * j) * size, col(11 + 3 * j) * size, col(12 + 3 * j)
        allies.append(
            record(
                f"obs.allies[{j}]",
                x=num(ax),
                z=num(az),
                hp=num(ahp * npc_hp),
                alive=boolean(ahp > 0.0),
                index=num(jnp.where(index <= j, j + 1.0, float(j))),  # row i skips NPC i
                distance=dist(ax, az),
            )
        )
    tag = num(jnp.round(col(22) * (NUM_TAGS - 1)))
    return record(
        "obs", index=num(index), tag=tag, me=me, bot=bot, cover=cover, allies=Val(UNITS, tuple(allies), "obs.allies")
    )


@dataclasses.dataclass
class _Flow:
    env: dict  # name -> Val or _Unassigned
    done: Val  # BOOL: static True once every path has returned
    result: Val | None


@dataclasses.dataclass(frozen=True)
class _Unassigned:
    """A variable assigned in only one branch of an `if`: reading it afterwards is an error."""

    line: int


def _all_done(flow: _Flow) -> bool:
    return flow.done.static and bool(flow.done.v)


class _Program:
    """The checked AST, split into functions and top-level constants."""

    def __init__(self, source: str, tree: ast.Module):
        self.source = source
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        self.constants = [s for s in tree.body if isinstance(s, ast.Assign)]

    def run(self, obs: jax.Array, key) -> jax.Array:
        walker = _Walker(self, obs, key)
        try:
            value = walker.function("policy", [walker.obs], self.functions["policy"])
        except RecursionError:
            raise ProgramError("limit", "the program nests too deeply after inlining its functions") from None
        return jnp.broadcast_to(jnp.asarray(value.v, jnp.int32), obs.shape[:-1])


class _Walker:
    """One translation: walks the program for one traced observation and key."""

    def __init__(self, program: _Program, obs: jax.Array, key):
        self.program = program
        self.shape = obs.shape[:-1]
        self.obs = observation_record(obs)
        self.key = key
        self.draws = 0
        self.visited = 0
        self.constants: dict[str, Val] = {}
        flow = _Flow({}, boolean(False), None)
        for stmt in program.constants:
            name = stmt.targets[0].id
            value = self.expr(stmt.value, flow)
            if not (value.static or value.kind == ACTION):
                raise self.error("type", f"top-level {name} must be a constant number, got {describe(value)}", stmt)
            self.constants[name] = flow.env[name] = value

    # -- the context helpers read
    def next_key(self):
        """A fresh key per random() call: the policy key first (as the scripted squads draw), then fold-ins."""
        if self.key is None:
            raise LangError("runtime", "random() needs the policy key; call the policy with a key")
        self.draws += 1
        return self.key if self.draws == 1 else jax.random.fold_in(self.key, self.draws - 1)

    def error(self, kind: str, message: str, node: ast.AST | None) -> ProgramError:
        return error_at(kind, message, self.program.source, getattr(node, "lineno", None))

    def _tick(self, node: ast.AST, weight: int = 1) -> None:
        self.visited += weight
        if self.visited > limits.MAX_TRANSLATED_NODES:
            raise self.error(
                "limit",
                f"the program grows past {limits.MAX_TRANSLATED_NODES:,} nodes once loops are unrolled and "
                "functions inlined; use fewer or smaller loops",
                node,
            )

    # -- functions and statements
    def function(self, name: str, args: list[Val], node: ast.AST) -> Val:
        fn = self.program.functions[name]
        env = dict(self.constants)
        env.update({a.arg: v for a, v in zip(fn.args.args, args, strict=True)})
        flow = self.block(fn.body, _Flow(env, boolean(False), None), in_policy=name == "policy")
        if not _all_done(flow):
            what = "an action" if name == "policy" else "a value"
            raise self.error(
                "type",
                f"{name} can reach its end without returning {what}: end every path with a return"
                + (" (e.g. a final `return MOVE_TO_BOT`)" if name == "policy" else ""),
                fn.body[-1],
            )
        return flow.result

    def block(self, stmts: list[ast.stmt], flow: _Flow, in_policy: bool) -> _Flow:
        for stmt in stmts:
            if _all_done(flow):
                break  # the rest of the block is unreachable
            self._tick(stmt)
            try:
                flow = self.statement(stmt, flow, in_policy)
            except LangError as e:
                raise self.error(e.kind, e.message, stmt) from None
        return flow

    def statement(self, stmt: ast.stmt, flow: _Flow, in_policy: bool) -> _Flow:
        if isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value, flow)
            for target in stmt.targets:
                flow.env[target.id] = value
        elif isinstance(stmt, ast.AugAssign):
            name = stmt.target.id
            flow.env[name] = arith(_BINOPS[type(stmt.op)], self.lookup(name, flow, stmt), self.expr(stmt.value, flow))
        elif isinstance(stmt, ast.Return):
            value = self.expr(stmt.value, flow)
            if in_policy and value.kind != ACTION:
                raise LangError("type", f"policy must return an action ({_ACTION_LIST}), got {describe(value)}")
            result = value if flow.result is None else select(flow.done, flow.result, value, "the returns")
            flow = _Flow(flow.env, boolean(True), result)
        elif isinstance(stmt, ast.If):
            flow = self.if_statement(stmt, flow, in_policy)
        elif isinstance(stmt, ast.For):
            flow = self.for_loop(stmt, flow, in_policy)
        # Pass and docstrings do nothing; the sandbox admitted no other statement.
        return flow

    def if_statement(self, stmt: ast.If, flow: _Flow, in_policy: bool) -> _Flow:
        cond = truth(self.expr(stmt.test, flow), "an if condition")
        if cond.static:
            return self.block(stmt.body if cond.v else stmt.orelse, flow, in_policy)
        then = self.block(stmt.body, _Flow(dict(flow.env), flow.done, flow.result), in_policy)
        other = self.block(stmt.orelse, _Flow(dict(flow.env), flow.done, flow.result), in_policy)
        return self.merge(cond, then, other, stmt)

    def merge(self, cond: Val, a: _Flow, b: _Flow, stmt: ast.If) -> _Flow:
        done = select(cond, a.done, b.done)
        if a.result is None or b.result is None:
            result = a.result if b.result is None else b.result
        else:
            result = select(cond, a.result, b.result, "the returns")
        if _all_done(a) or _all_done(b):  # only the other branch goes on
            env = b.env if _all_done(a) else a.env
            return _Flow(env, done, result)
        env = {}
        for name in a.env.keys() | b.env.keys():
            va, vb = a.env.get(name), b.env.get(name)
            if va is vb:
                env[name] = va
            elif va is None or vb is None or isinstance(va, _Unassigned) or isinstance(vb, _Unassigned):
                env[name] = _Unassigned(stmt.lineno)
            else:
                env[name] = select(cond, va, vb, f"the branches of the if on line {stmt.lineno} (variable {name})")
        return _Flow(env, done, result)

    def for_loop(self, stmt: ast.For, flow: _Flow, in_policy: bool) -> _Flow:
        it = stmt.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            bounds = [self.expr(a, flow) for a in it.args]
            if not all(b.static and isinstance(b.v, int) and not isinstance(b.v, bool) for b in bounds):
                raise LangError("type", "range bounds must be constant whole numbers (literals, constants or counters)")
            items = range(*(b.v for b in bounds)) if bounds[-1].v != 0 or len(bounds) < 3 else None
            if items is None:
                raise LangError("runtime", "range step must not be zero")
            if len(items) > limits.MAX_UNROLL:
                raise LangError("limit", f"range of {len(items):,} steps; loops unroll at most {limits.MAX_UNROLL}")
            values = [num(i) for i in items]
        else:
            seq = self.expr(it, flow)
            if seq.kind != UNITS:
                raise LangError("type", f"for loops go over range(N) or obs.allies, not {describe(seq)}")
            values = list(seq.v)
        for value in values:
            flow.env[stmt.target.id] = value
            flow = self.block(stmt.body, flow, in_policy)
            if _all_done(flow):
                break
        return flow

    # -- expressions
    def lookup(self, name: str, flow: _Flow, node: ast.AST) -> Val:
        value = flow.env.get(name)
        if isinstance(value, _Unassigned):
            raise LangError(
                "name", f"{name} may be unassigned here: the if on line {value.line} assigns it in one branch only"
            )
        if value is not None:
            return value
        if name in ACTIONS:
            return Val(ACTION, jnp.int32(ACTIONS[name][0]), name)
        if name in CONSTANTS:
            return num(CONSTANTS[name][0])
        raise LangError("name", f"{name} is used before it is assigned")

    def expr(self, node: ast.expr, flow: _Flow) -> Val:
        self._tick(node)
        try:
            return self._expr(node, flow)
        except LangError as e:
            raise self.error(e.kind, e.message, node) from None

    def _expr(self, node: ast.expr, flow: _Flow) -> Val:
        if isinstance(node, ast.Constant):
            return boolean(node.value) if isinstance(node.value, bool) else num(node.value)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, flow, node)
        if isinstance(node, ast.Attribute):
            return self.expr(node.value, flow).field(node.attr)
        if isinstance(node, ast.Subscript):
            return self.subscript(self.expr(node.value, flow), self.expr(node.slice, flow))
        if isinstance(node, ast.BinOp):
            return arith(_BINOPS[type(node.op)], self.expr(node.left, flow), self.expr(node.right, flow))
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand, flow)
            if isinstance(node.op, ast.Not):
                return logical_not(operand)
            return negate(operand) if isinstance(node.op, ast.USub) else to_num(operand, "the operand of unary +")
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            out = self.expr(node.values[0], flow)
            for value in node.values[1:]:
                out = logical(op, out, self.expr(value, flow))
            return truth(out)
        if isinstance(node, ast.Compare):
            left, out = self.expr(node.left, flow), None
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self.expr(right_node, flow)
                step = compare(_CMPOPS[type(op)], left, right)
                out = step if out is None else logical("and", out, step)
                left = right
            return out
        if isinstance(node, ast.IfExp):
            cond = truth(self.expr(node.test, flow), "the condition of `a if c else b`")
            if cond.static:
                return self.expr(node.body if cond.v else node.orelse, flow)
            body, orelse = self.expr(node.body, flow), self.expr(node.orelse, flow)
            return select(cond, body, orelse, "the two sides of `a if c else b`")
        if isinstance(node, ast.Call):
            name = node.func.id
            args = [self.expr(a, flow) for a in node.args]
            if name in HELPERS:
                self._tick(node, HELPERS[name].cost)
                return call(self, name, args)
            return self.function(name, args, node)
        raise LangError("forbidden", f"{type(node).__name__} is not part of the language")

    @staticmethod
    def subscript(seq: Val, index: Val) -> Val:
        if seq.kind != UNITS:
            raise LangError("type", f"only a list of units (obs.allies) can be indexed, not {describe(seq)}")
        if not (index.static and isinstance(index.v, int) and not isinstance(index.v, bool)):
            raise LangError("type", "a list index must be a constant whole number or a loop counter")
        if not -len(seq.v) <= index.v < len(seq.v):
            raise LangError("type", f"index {index.v} is out of range: {seq.label} has {len(seq.v)} units")
        return seq.v[index.v]


def translate(source: str) -> Policy:
    """The jittable policy of a program: `policy(params, obs (..., 5, 23), key) -> int32 actions (..., 5)`.

    Checks the source (`sandbox.check_program`) and traces it once abstractly, so that type errors
    (a wrong return, a variable unassigned on some path) raise a `ProgramError` here, not at first use.
    """
    program = _Program(source, check_program(source))

    def policy(params, obs, key=None):
        del params  # a program has no parameters of its own
        obs = jnp.asarray(obs, jnp.float32)
        if obs.ndim < 2 or obs.shape[-2:] != (NUM_NPCS, OBS_SIZE):
            raise ValueError(f"a coder policy reads (..., {NUM_NPCS}, {OBS_SIZE}) observations, got {obs.shape}")
        return program.run(obs, key)

    policy.source = source
    jaxpr = jax.make_jaxpr(policy)(None, jax.ShapeDtypeStruct((NUM_NPCS, OBS_SIZE), jnp.float32), jax.random.key(0))
    ops = count_ops(jaxpr.jaxpr)
    if ops > limits.MAX_OPS:
        raise ProgramError(
            "limit", f"the program translates to {ops:,} operations; the limit is {limits.MAX_OPS:,} (fewer loops)"
        )
    return policy


def count_ops(jaxpr) -> int:
    """Equations of a jaxpr, those of nested jaxprs (random draws, conds) included."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for sub in jax_core.jaxprs_in_params(eqn.params):
            total += count_ops(sub)
    return total
