"""The sandbox's whitelist: what a program may not use, and the reason each refusal gives."""

from __future__ import annotations

import ast

from . import limits
from .helpers import HELPERS
from .language import ACTIONS, CONSTANTS

# Python built-ins with the reason a program may not use them; any other built-in gets a generic reason.
BUILTIN_REASONS = {
    **dict.fromkeys(
        ("eval", "exec", "compile", "open", "__import__", "input", "breakpoint", "exit", "quit", "help"),
        "is not available: programs cannot run code, read or write files or import",
    ),
    **dict.fromkeys(
        ("getattr", "setattr", "delattr", "hasattr", "globals", "locals", "vars", "dir", "type", "object", "super"),
        "is not available: programs cannot inspect or reach objects; read obs.<field> directly",
    ),
    "len": "is not available: obs.allies always has 4 units; use count_alive(units) to count living ones",
    "print": "is not available: a program cannot print; return an action",
    "sum": "is not available: add up in a `for` loop",
    "round": "is not available: use // for floor",
    "int": "is not available: numbers are float32; use // for floor",
    "float": "is not available: numbers are already float32",
    "range": "is only allowed as the iterable of `for i in range(N)`",
}

# Syntax outside the language, by AST node type, with the reason given.
NODE_REASONS = {
    ast.Import: "imports are not allowed",
    ast.ImportFrom: "imports are not allowed",
    ast.While: f"while loops are not allowed; use `for i in range(N)` with a constant N <= {limits.MAX_UNROLL}",
    ast.Break: "break is not supported; use a condition (or return)",
    ast.Continue: "continue is not supported; use an if",
    ast.Lambda: "lambda is not allowed; define a top-level helper function",
    ast.ListComp: "comprehensions are not allowed; use a for loop",
    ast.SetComp: "comprehensions are not allowed; use a for loop",
    ast.DictComp: "comprehensions are not allowed; use a for loop",
    ast.GeneratorExp: "generator expressions are not allowed; use a for loop",
    ast.ClassDef: "classes are not allowed",
    ast.AsyncFunctionDef: "async functions are not allowed",
    ast.With: "with is not allowed",
    ast.AsyncWith: "with is not allowed",
    ast.AsyncFor: "async for is not allowed",
    ast.Try: "try is not allowed; programs cannot raise or catch exceptions",
    ast.Raise: "raise is not allowed",
    ast.Assert: "assert is not allowed",
    ast.Delete: "del is not allowed",
    ast.Global: "global is not allowed",
    ast.Nonlocal: "nonlocal is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
    ast.Await: "await is not allowed",
    ast.JoinedStr: "f-strings are not allowed (strings are not part of the language)",
    ast.FormattedValue: "f-strings are not allowed (strings are not part of the language)",
    ast.NamedExpr: "the walrus operator := is not allowed; assign on its own line",
    ast.Starred: "starred expressions (*x) are not allowed",
    ast.List: "lists are not part of the language (obs.allies is the one list)",
    ast.Tuple: "tuples are not part of the language; assign one name at a time",
    ast.Dict: "dicts are not part of the language",
    ast.Set: "sets are not part of the language",
    ast.Slice: "slices are not allowed; index with a constant, e.g. obs.allies[0]",
    ast.AnnAssign: "annotated assignments are not supported; write `x = value`",
    ast.Match: "match is not allowed; use if/elif/else",
}
if hasattr(ast, "TryStar"):
    NODE_REASONS[ast.TryStar] = "try is not allowed; programs cannot raise or catch exceptions"

OPERATORS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.And: "and",
    ast.Or: "or",
    ast.Not: "not",
    ast.USub: "-",
    ast.UAdd: "+",
}

# Names a program may read but never assign.
RESERVED = frozenset(HELPERS) | frozenset(ACTIONS) | frozenset(CONSTANTS) | {"range"}
