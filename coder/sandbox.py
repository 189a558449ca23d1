"""The sandbox of the squad-policy language: source is parsed and checked against a whitelist, never executed.

`check_program(source)` returns the parsed module once the source is within
the size limits, uses only the language's syntax, names, fields and helpers
(docs/coder.md), and has no recursion; otherwise it raises a `ProgramError`
with a kind, the offending line and a reason a critic can act on. The
translator then reads the AST and builds JAX ops; nothing in a program is
ever run by the Python interpreter.
"""

from __future__ import annotations

import ast
import builtins
import difflib

from . import limits
from .helpers import HELPERS
from .language import ACTIONS, CONSTANTS, FIELD_NAMES
from .program_error import ProgramError, error_at
from .sandbox_rules import BUILTIN_REASONS, NODE_REASONS, OPERATORS, RESERVED

# The sandbox's own entry point.
__all__ = ["check_program"]


def check_program(source: str) -> ast.Module:
    """The parsed module of `source` once it passes every rule of the sandbox; else raises ProgramError."""
    if not isinstance(source, str):
        raise ProgramError("syntax", f"a program is source text (str), got {type(source).__name__}")
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > limits.MAX_SOURCE_BYTES:
        raise ProgramError("limit", f"the source is {size:,} bytes; the limit is {limits.MAX_SOURCE_BYTES:,}")
    n_lines = source.count("\n") + 1
    if n_lines > limits.MAX_LINES:
        raise ProgramError("limit", f"the source has {n_lines} lines; the limit is {limits.MAX_LINES}")
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as e:
        line = e.lineno if e.lineno and e.lineno > 0 else None
        raise error_at("syntax", e.msg or "invalid syntax", source, line) from None
    except (RecursionError, MemoryError):
        raise ProgramError("limit", "the source is nested too deeply to parse") from None
    except ValueError as e:  # e.g. null bytes
        raise ProgramError("syntax", str(e)) from None
    _Checker(source).check(tree)
    return tree


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _Checker:
    def __init__(self, source: str):
        self.source = source

    def fail(self, kind: str, message: str, node: ast.AST | None) -> ProgramError:
        return error_at(kind, message, self.source, getattr(node, "lineno", None))

    # -- whole-tree limits, computed without recursion (a deep tree must not crash the checker)
    def _sizes(self, tree: ast.AST) -> None:
        count, stack = 0, [(tree, 1)]
        while stack:
            node, depth = stack.pop()
            count += 1
            if count > limits.MAX_AST_NODES:
                raise self.fail("limit", f"the program has more than {limits.MAX_AST_NODES:,} syntax nodes", node)
            if depth > limits.MAX_AST_DEPTH:
                raise self.fail("limit", f"expressions or blocks nested deeper than {limits.MAX_AST_DEPTH}", node)
            stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))

    def check(self, tree: ast.Module) -> None:
        self._sizes(tree)
        self.functions: dict[str, ast.FunctionDef] = {}
        self.module_names: set[str] = set()
        body = tree.body
        if body and _is_docstring(body[0]):
            body = body[1:]
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef):
                self._declare_function(stmt)
            elif isinstance(stmt, ast.Assign):
                self._module_constant(stmt)
            elif _is_docstring(stmt):
                continue
            else:
                raise self._statement_error(stmt, top_level=True)
        if "policy" not in self.functions:
            raise ProgramError("name", "the program must define `def policy(obs):` returning an action")
        if len(self.functions["policy"].args.args) != 1:
            raise self.fail("type", "policy takes exactly one parameter: def policy(obs):", self.functions["policy"])
        if len(self.functions) > limits.MAX_FUNCTIONS:
            raise ProgramError("limit", f"at most {limits.MAX_FUNCTIONS} functions (policy and its helpers)")
        for fn in self.functions.values():
            self._function_body(fn)
        self._no_recursion()

    def _statement_error(self, stmt: ast.stmt, top_level: bool = False) -> ProgramError:
        reason = NODE_REASONS.get(type(stmt))
        if reason:
            return self.fail("forbidden", reason, stmt)
        if isinstance(stmt, ast.Expr):
            # What the expression tries (an import, a dunder walk, exec) is the better reason: raised first.
            self._expr(stmt.value, getattr(self, "scope", frozenset(self.module_names)), in_function=not top_level)
            return self.fail("forbidden", "an expression on its own has no effect; assign it or return it", stmt)
        if top_level:
            return self.fail(
                "forbidden", "only functions (def) and constants (NAME = number) are allowed at the top level", stmt
            )
        return self.fail("forbidden", f"{type(stmt).__name__} statements are not part of the language", stmt)

    def _check_new_name(self, name: str, node: ast.AST, what: str) -> None:
        if "__" in name:
            raise self.fail("forbidden", f"names with a double underscore are not allowed: {name}", node)
        if name in RESERVED or name in self.functions:
            raise self.fail("forbidden", f"{name} is a name of the language and cannot be redefined as a {what}", node)
        if name in BUILTIN_REASONS or hasattr(builtins, name):
            raise self.fail("forbidden", f"{name} is a Python built-in and cannot be redefined as a {what}", node)

    def _declare_function(self, fn: ast.FunctionDef) -> None:
        self._check_new_name(fn.name, fn, "function")
        if fn.name in self.module_names:
            raise self.fail("forbidden", f"{fn.name} is already a constant", fn)
        if fn.decorator_list:
            raise self.fail("forbidden", "decorators are not allowed", fn.decorator_list[0])
        a = fn.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults:
            raise self.fail("forbidden", "functions take plain positional parameters only: def name(a, b):", fn)
        if fn.returns is not None or any(arg.annotation is not None for arg in a.args):
            raise self.fail("forbidden", "type annotations are not supported; write def name(a, b):", fn)
        if len(a.args) > limits.MAX_ARGS:
            raise self.fail("limit", f"a function takes at most {limits.MAX_ARGS} parameters", fn)
        if getattr(fn, "type_params", None):
            raise self.fail("forbidden", "type parameters are not supported", fn)
        for arg in a.args:
            self._check_new_name(arg.arg, fn, "parameter")
        if len({arg.arg for arg in a.args}) != len(a.args):
            raise self.fail("syntax", "duplicate parameter names", fn)
        if fn.name in self.functions:
            raise self.fail("forbidden", f"function {fn.name} is defined twice", fn)
        self.functions[fn.name] = fn

    def _module_constant(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise self.fail("forbidden", "a top-level assignment names one constant: NAME = number", stmt)
        name = stmt.targets[0].id
        self._check_new_name(name, stmt, "constant")
        if name in self.module_names:
            raise self.fail("forbidden", f"constant {name} is assigned twice", stmt)
        # Only names defined above: constants, actions and helpers; never obs.
        self._expr(stmt.value, frozenset(self.module_names), in_function=False)
        self.module_names.add(name)

    def _function_body(self, fn: ast.FunctionDef) -> None:
        params = {arg.arg for arg in fn.args.args}
        local = set(params)
        for node in ast.walk(fn):  # safe: depth is bounded by _sizes
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self._check_new_name(node.id, node, "variable")
                if node.id in self.module_names:
                    raise self.fail("forbidden", f"{node.id} is a top-level constant and cannot be assigned", node)
                local.add(node.id)
        self.scope = frozenset(local | self.module_names)
        body = fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else fn.body
        if not body:
            raise self.fail("type", f"{fn.name} has no statements; it must return a value", fn)
        self._block(body)

    def _block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self._statement(stmt)

    def _statement(self, stmt: ast.stmt) -> None:
        scope = self.scope
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._target(target)
            self._expr(stmt.value, scope)
        elif isinstance(stmt, ast.AugAssign):
            self._target(stmt.target)
            self._operator(stmt.op, stmt)
            self._expr(stmt.value, scope)
        elif isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self.fail("type", "return needs a value: return one of the action names", stmt)
            self._expr(stmt.value, scope)
        elif isinstance(stmt, ast.If):
            self._expr(stmt.test, scope)
            self._block(stmt.body)
            self._block(stmt.orelse)
        elif isinstance(stmt, ast.For):
            if stmt.orelse:
                raise self.fail("forbidden", "for/else is not supported", stmt)
            self._target(stmt.target)
            it = stmt.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
                if it.keywords or not 1 <= len(it.args) <= 3:
                    raise self.fail("type", "range takes 1 to 3 positional arguments: range(N)", it)
                for arg in it.args:
                    self._expr(arg, scope)
            else:
                self._expr(it, scope)
            self._block(stmt.body)
        elif isinstance(stmt, ast.Pass) or _is_docstring(stmt):
            pass
        elif isinstance(stmt, ast.FunctionDef):
            raise self.fail("forbidden", "functions must be defined at the top level, not inside another", stmt)
        else:
            raise self._statement_error(stmt)

    def _target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            return  # checked in _function_body
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            if isinstance(target, ast.Attribute) and "__" in target.attr:
                raise self.fail("forbidden", f"dunder attributes are not allowed: .{target.attr}", target)
            raise self.fail("forbidden", "obs and its records are read-only; assign to a variable instead", target)
        reason = NODE_REASONS.get(type(target), "assign to a single name: x = value")
        raise self.fail("forbidden", reason, target)

    def _operator(self, op: ast.AST, node: ast.AST) -> None:
        if type(op) not in OPERATORS:
            raise self.fail(
                "forbidden", f"operator {type(op).__name__} is not supported; use + - * / // % ** and/or/not", node
            )

    def _expr(self, root: ast.expr, scope: frozenset, in_function: bool = True) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            reason = NODE_REASONS.get(type(node))
            if reason:
                raise self.fail("forbidden", reason, node)
            if isinstance(node, ast.Name):
                self._load(node, scope, in_function)
            elif isinstance(node, ast.Constant):
                self._constant(node)
            elif isinstance(node, ast.Attribute):
                if "__" in node.attr:
                    raise self.fail("forbidden", f"dunder attributes are not allowed: .{node.attr}", node)
                if node.attr not in FIELD_NAMES:
                    fields = ", ".join(sorted(FIELD_NAMES))
                    raise self.fail(
                        "name", f"unknown field .{node.attr}{_suggest(node.attr, FIELD_NAMES)}; fields: {fields}", node
                    )
                stack.append(node.value)
            elif isinstance(node, ast.Subscript):
                stack.extend((node.value, node.slice))
            elif isinstance(node, ast.Call):
                self._call(node, scope, in_function)
                stack.extend(node.args)
            elif isinstance(node, ast.BinOp):
                self._operator(node.op, node)
                stack.extend((node.left, node.right))
            elif isinstance(node, ast.UnaryOp):
                self._operator(node.op, node)
                stack.append(node.operand)
            elif isinstance(node, ast.BoolOp):
                stack.extend(node.values)
            elif isinstance(node, ast.Compare):
                for op in node.ops:
                    if type(op) not in OPERATORS:
                        raise self.fail("forbidden", f"comparison {type(op).__name__} is not supported", node)
                stack.extend([node.left, *node.comparators])
            elif isinstance(node, ast.IfExp):
                stack.extend((node.test, node.body, node.orelse))
            else:
                raise self.fail("forbidden", f"{type(node).__name__} is not part of the language", node)

    def _load(self, node: ast.Name, scope: frozenset, in_function: bool) -> None:
        name = node.id
        if "__" in name:
            raise self.fail("forbidden", f"names with a double underscore are not allowed: {name}", node)
        if name in HELPERS or name in self.functions:
            raise self.fail("type", f"{name} is a function: call it, {name}(...)", node)
        if name in scope or name in ACTIONS or name in CONSTANTS:
            return
        if name in BUILTIN_REASONS:
            raise self.fail("forbidden", f"{name} {BUILTIN_REASONS[name]}", node)
        if hasattr(builtins, name):
            raise self.fail("forbidden", f"{name} is a Python built-in the language does not have", node)
        if name == "obs":
            raise self.fail("name", "obs is policy's parameter; pass it to other functions as an argument", node)
        known = set(scope) | set(ACTIONS) | set(CONSTANTS)
        raise self.fail("name", f"unknown name {name}{_suggest(name, known)}", node)

    def _constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, (str, bytes)):
            raise self.fail("forbidden", "strings are not part of the language (only as a docstring)", node)
        if isinstance(value, bool):
            return
        if not isinstance(value, (int, float)):
            raise self.fail("forbidden", f"the constant {value!r} is not part of the language", node)
        if abs(value) > limits.MAX_CONSTANT:
            raise self.fail("limit", f"number literals are limited to {limits.MAX_CONSTANT:,} in magnitude", node)

    def _call(self, node: ast.Call, scope: frozenset, in_function: bool) -> None:
        if node.keywords:
            raise self.fail("forbidden", "keyword arguments are not supported; pass arguments by position", node)
        func = node.func
        if not isinstance(func, ast.Name):
            # Name the worst thing about the callee: attribute walks and format strings are the usual escapes.
            for sub in ast.walk(func):  # depth is bounded by _sizes
                if isinstance(sub, ast.Name) and "__" in sub.id:
                    raise self.fail("forbidden", f"names with a double underscore are not allowed: {sub.id}", sub)
                if isinstance(sub, ast.Attribute) and "__" in sub.attr:
                    raise self.fail("forbidden", f"dunder attributes are not allowed: .{sub.attr}", sub)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, (str, bytes)):
                    raise self.fail("forbidden", "strings are not part of the language (only as a docstring)", sub)
            raise self.fail("forbidden", "only helpers and your own functions can be called, by name: f(x)", node)
        name = func.id
        if "__" in name:
            raise self.fail("forbidden", f"names with a double underscore are not allowed: {name}", node)
        for arg in node.args:  # *args and generators first: their reason beats an argument count
            if type(arg) in NODE_REASONS:
                raise self.fail("forbidden", NODE_REASONS[type(arg)], arg)
        if name in HELPERS:
            h = HELPERS[name]
            if len(node.args) < h.min_args or (h.max_args is not None and len(node.args) > h.max_args):
                raise self.fail("type", f"wrong number of arguments: {h.signature}", node)
        elif name in self.functions and in_function:
            want = len(self.functions[name].args.args)
            if len(node.args) != want:
                raise self.fail("type", f"{name} takes {want} argument(s), got {len(node.args)}", node)
        elif name in BUILTIN_REASONS:
            raise self.fail("forbidden", f"{name} {BUILTIN_REASONS[name]}", node)
        elif hasattr(builtins, name):
            raise self.fail("forbidden", f"{name} is a Python built-in the language does not have", node)
        elif name in self.functions:
            raise self.fail("forbidden", "your functions can be called inside functions, not at the top level", node)
        else:
            hint = _suggest(name, set(HELPERS) | set(self.functions))
            raise self.fail("name", f"unknown function {name}{hint}", node)

    def _no_recursion(self) -> None:
        # First call of each callee, per function: the graph has at most MAX_FUNCTIONS nodes.
        calls: dict[str, dict[str, ast.Call]] = {}
        for name, fn in self.functions.items():
            calls[name] = {}
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.functions:
                    calls[name].setdefault(n.func.id, n)
        # Depth-first search for a cycle, iteratively; the path gives the message.
        for start in self.functions:
            stack = [(start, [start])]
            while stack:
                name, path = stack.pop()
                for callee, call in calls[name].items():
                    if callee == start:
                        chain = " -> ".join([*path, callee])
                        raise self.fail("forbidden", f"recursion is not allowed: {chain}", call)
                    if callee not in path:
                        stack.append((callee, [*path, callee]))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
