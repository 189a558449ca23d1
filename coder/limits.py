"""Size limits of the squad-policy language: one place, read by the sandbox, the translator and the reference."""

from __future__ import annotations

MAX_SOURCE_BYTES = 20_000
MAX_LINES = 400
MAX_AST_NODES = 5_000
MAX_AST_DEPTH = 60  # a handful of nested ifs inside a loop is about 20
MAX_CONSTANT = 1_000_000  # largest magnitude of a number literal or a constant folded from literals
MAX_UNROLL = 64  # largest N in `for i in range(N)`
MAX_FUNCTIONS = 8  # `policy` and its helper functions
MAX_ARGS = 8  # parameters of one helper function
# Work the translator may do after unrolling loops and inlining functions: AST nodes visited, a helper
# call weighing about the ops it emits. It bounds nested loops and functions calling functions (which the
# source size alone does not) and so the time a translation takes, before MAX_OPS is measured.
MAX_TRANSLATED_NODES = 20_000
# Operations of the traced program (equations of its jaxpr, nested ones included): what XLA must compile,
# and the direct measure of a program's size once helpers (several ops each) are expanded.
MAX_OPS = 10_000
