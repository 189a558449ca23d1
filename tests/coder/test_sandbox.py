"""The hostile battery: programs that try to escape, hang or exhaust the compiler are each refused with a reason.

Every program goes through `compile_program`, the real entry point (sandbox check, translation and
trace in the limited worker subprocess), and, where the sandbox is the rule that refuses it, through
`check_program` as well. Programs that try side effects aim at files under tmp_path; none may appear.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from jaxarena.coder import limits
from jaxarena.coder.compile import compile_program
from jaxarena.coder.program_error import KINDS, ProgramError
from jaxarena.coder.sandbox import check_program

MARKER = "PWNED"  # the file name hostile programs try to create under tmp_path


def policy_with(*lines):
    """A policy whose body is `lines` followed by a valid return."""
    return "def policy(obs):\n" + "".join(f"    {line}\n" for line in lines) + "    return MELEE\n"


def _hostile(path):
    p = os.path.join(path, MARKER)
    # name: (source, kind, reason pattern, line of the offence)
    return {
        "import": ("import os\ndef policy(obs):\n    return MELEE\n", "forbidden", "imports are not allowed", 1),
        "from_import": ("from os import system\n" + policy_with(), "forbidden", "imports are not allowed", 1),
        "import_in_function": (policy_with("import os"), "forbidden", "imports are not allowed", 2),
        "dunder_import": (policy_with(f"__import__('os').system('touch {p}')"), "forbidden", "double underscore", 2),
        "subclasses_walk": (
            policy_with("x = ().__class__.__base__.__subclasses__()"),
            "forbidden",
            "dunder attributes",
            2,
        ),
        "obs_class": (policy_with("x = obs.__class__"), "forbidden", "dunder attributes", 2),
        "obs_dict": (policy_with("x = obs.__dict__"), "forbidden", "dunder attributes", 2),
        "helper_globals": (policy_with("x = nearest.__globals__"), "forbidden", "dunder attributes", 2),
        "getattr": (policy_with("x = getattr(obs, '__class__')"), "forbidden", "getattr is not available", 2),
        "format_string": (policy_with("x = '{0.__class__}'.format(obs)"), "forbidden", "strings are not part", 2),
        "fstring": (policy_with("x = f'{obs.__class__}'"), "forbidden", "f-strings are not allowed", 2),
        "eval": (policy_with("x = eval('1')"), "forbidden", "eval is not available", 2),
        "exec": (policy_with(f'exec(\'open("{p}", "w")\')'), "forbidden", "exec is not available", 2),
        "open_write": (policy_with(f"f = open('{p}', 'w')"), "forbidden", "open is not available", 2),
        "open_no_string": (policy_with("f = open(obs, 1)"), "forbidden", "open is not available", 2),
        "compile": (policy_with("c = compile(1, 2, 3)"), "forbidden", "compile is not available", 2),
        "globals": (policy_with("g = globals()"), "forbidden", "globals is not available", 2),
        "vars": (policy_with("g = vars(obs)"), "forbidden", "vars is not available", 2),
        "type": (policy_with("t = type(obs)"), "forbidden", "type is not available", 2),
        "dir": (policy_with("t = dir()"), "forbidden", "dir is not available", 2),
        "builtins_name": (policy_with("b = __builtins__"), "forbidden", "double underscore", 2),
        "while_true": (policy_with("while True:", "    pass"), "forbidden", "while loops are not allowed", 2),
        "huge_range": (policy_with("for i in range(10**9):", "    pass"), "limit", "exceeds 1,000,000", 2),
        "range_over_unroll": (policy_with("for i in range(100000):", "    pass"), "limit", "unroll at most 64", 2),
        "nested_ranges": (
            policy_with(
                "s = 0", "for i in range(64):", "    for j in range(64):", "        s = s + random() * obs.me.hp"
            ),
            "limit",
            "grows past",
            5,
        ),
        "power_tower": (policy_with("x = 10**10**10"), "limit", "exceeds 1,000,000", 2),
        "huge_literal": (policy_with("x = 10000000000"), "limit", "number literals are limited", 2),
        "string_bomb": (policy_with("x = 'a' * 10**9"), "forbidden", "strings are not part", 2),
        "self_recursion": ("def policy(obs):\n    return policy(obs)\n", "forbidden", "recursion.*policy -> policy", 2),
        "mutual_recursion": (
            "def f(o):\n    return g(o)\ndef g(o):\n    return f(o)\ndef policy(obs):\n    return f(obs)\n",
            "forbidden",
            "recursion.*f -> g -> f",
            4,
        ),
        "deep_parens": (
            "def policy(obs):\n    return " + "(" * 2000 + "MELEE" + ")" * 2000 + "\n",
            "syntax",
            "too many nested parentheses",
            2,
        ),
        "deep_sum": ("def policy(obs):\n    x = " + "1+" * 5000 + "1\n    return MELEE\n", "limit", "nested", None),
        "deep_unary": ("def policy(obs):\n    x = " + "-" * 5000 + "1\n    return MELEE\n", "limit", "nested", None),
        "deep_ifs": (
            "def policy(obs):\n"
            + "".join("    " * (i + 1) + "if obs.index > 0:\n" for i in range(60))
            + "    " * 61
            + "x = 1\n    return MELEE\n",
            "limit",
            "nested deeper",
            None,
        ),
        "lambda": (policy_with("f = lambda: 1"), "forbidden", "lambda is not allowed", 2),
        "list_comprehension": (policy_with("x = [a.hp for a in obs.allies]"), "forbidden", "comprehensions", 2),
        "generator": (policy_with("x = max(a.hp for a in obs.allies)"), "forbidden", "generator expressions", 2),
        "class": ("class A:\n    pass\n" + policy_with(), "forbidden", "classes are not allowed", 1),
        "global": (policy_with("global MELEE"), "forbidden", "global is not allowed", 2),
        "nonlocal": (
            "def f(x):\n    nonlocal y\n    return x\n" + policy_with(),
            "forbidden",
            "nonlocal is not allowed",
            2,
        ),
        "unknown_field": (policy_with("x = obs.secret"), "name", r"unknown field \.secret", 2),
        "assign_field": (policy_with("obs.me.x = 1"), "forbidden", "read-only", 2),
        "assign_item": (policy_with("obs.allies[0] = 1"), "forbidden", "read-only", 2),
        "walrus": (policy_with("if (x := 1) > 0:", "    pass"), "forbidden", "walrus", 2),
        "starred": (policy_with("x = max(*obs.allies)"), "forbidden", "starred", 2),
        "decorator": ("@nearest\ndef policy(obs):\n    return MELEE\n", "forbidden", "decorators are not allowed", 1),
        "try": (policy_with("try:", "    x = 1", "except Exception:", "    pass"), "forbidden", "try is not", 2),
        "with": (policy_with("with obs:", "    pass"), "forbidden", "with is not allowed", 2),
        "yield": (policy_with("yield MELEE"), "forbidden", "yield is not allowed", 2),
        "async": ("async def policy(obs):\n    return MELEE\n", "forbidden", "async", 1),
        "raise": (policy_with("raise ValueError"), "forbidden", "raise is not allowed", 2),
        "del": (policy_with("x = 1", "del x"), "forbidden", "del is not allowed", 3),
        "print": (policy_with("x = print(obs)"), "forbidden", "print is not available", 2),
        "breakpoint": (policy_with("x = breakpoint()"), "forbidden", "breakpoint is not available", 2),
        "keyword_args": (policy_with("t = nearest(units=obs.allies)"), "forbidden", "keyword arguments", 2),
        "method_call": (policy_with("t = obs.allies.pop()"), "forbidden", "only helpers and your own functions", 2),
        "slice": (policy_with("t = obs.allies[0:2]"), "forbidden", "slices are not allowed", 2),
        "bitwise": (policy_with("t = obs.index & 1"), "forbidden", "operator BitAnd", 2),
        "is_none": (policy_with("t = obs is None"), "forbidden", "comparison Is", 2),
        "redefine_helper": (policy_with("nearest = 3"), "forbidden", "cannot be redefined", 2),
        "redefine_action": ("MELEE = 0\n" + policy_with(), "forbidden", "cannot be redefined", 1),
        "nested_def": (policy_with("def f():", "    return 1"), "forbidden", "top level", 2),
        "top_level_call": (policy_with() + "policy(0)\n", "forbidden", "not at the top level", 3),
        "top_level_if": ("if True:\n    pass\n" + policy_with(), "forbidden", "top level", 1),
        "no_policy": ("def act(obs):\n    return MELEE\n", "name", "must define `def policy", None),
        "two_params": ("def policy(obs, key):\n    return MELEE\n", "type", "exactly one parameter", 1),
        "annotations": ("def policy(obs) -> int:\n    return MELEE\n", "forbidden", "annotations", 1),
        "return_none": ("def policy(obs):\n    return\n", "type", "return needs a value", 2),
        "none_constant": (policy_with("x = None"), "forbidden", "None", 2),
        "unknown_name": (policy_with("x = nearst(obs.allies)"), "name", "did you mean nearest", 2),
        "source_too_long": ("# " + "x" * limits.MAX_SOURCE_BYTES + "\n" + policy_with(), "limit", "bytes", None),
        "too_many_lines": ("\n" * limits.MAX_LINES + policy_with(), "limit", "lines", None),
        "null_byte": (policy_with("x = 1\x00"), "syntax", "null bytes", None),
        "syntax_error": (policy_with("x = = 1"), "syntax", "invalid syntax", 2),
        "not_source": (b"def policy(obs):\n    return MELEE\n", "syntax", "source text", None),
    }


HOSTILE_NAMES = sorted(_hostile("/tmp"))


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_program_is_refused_with_its_reason(name, tmp_path):
    source, kind, pattern, line = _hostile(str(tmp_path))[name]
    with pytest.raises(ProgramError) as info:
        compile_program(source)
    err = info.value
    assert err.kind == kind, str(err)
    assert err.kind in KINDS
    assert re.search(pattern, err.message), str(err)
    if line is not None:
        assert err.line == line, str(err)
        assert str(err).startswith(f"line {line}: {kind}: ")
    assert not (tmp_path / MARKER).exists()  # 0 escapes: nothing was written
    assert list(tmp_path.iterdir()) == []


def test_the_sandbox_alone_refuses_what_it_is_responsible_for(tmp_path):
    # The refusals that are not about translation come from check_program itself, in this process.
    translation_kinds = {"nested_ranges", "huge_range", "range_over_unroll", "power_tower", "return_none"}
    for name, (source, kind, pattern, _) in _hostile(str(tmp_path)).items():
        if name in translation_kinds:
            continue
        with pytest.raises(ProgramError) as info:
            check_program(source)
        assert info.value.kind == kind and re.search(pattern, info.value.message), (name, str(info.value))


def test_a_rejection_names_the_offending_line():
    source = textwrap.dedent("""\
        def policy(obs):
            d = obs.bot.distance
            if d < 5:
                return MELEE
            x = obs.__class__
            return MOVE_TO_BOT
        """)
    with pytest.raises(ProgramError) as info:
        compile_program(source)
    err = info.value
    assert (err.kind, err.line, err.source_line) == ("forbidden", 5, "x = obs.__class__")
    assert str(err) == "line 5: forbidden: dunder attributes are not allowed: .__class__\n    x = obs.__class__"
    assert ProgramError.from_dict(err.to_dict()).to_dict() == err.to_dict()


def test_a_valid_program_compiles_to_a_policy():
    compiled = compile_program(policy_with("x = nearest(obs.allies)"))
    assert compiled.source.startswith("def policy")
    assert callable(compiled.policy)


def test_the_wall_clock_timeout_kills_the_worker_and_the_next_compile_works():
    heavy = policy_with("s = 0", "for i in range(40):", "    s = s + nearest(obs.allies, point(s, i)).hp")
    with pytest.raises(ProgramError) as info:
        compile_program(heavy, timeout_s=0.001)
    assert info.value.kind == "timeout" and "wall clock" in info.value.message
    assert callable(compile_program(policy_with()).policy)  # a fresh worker took over


def test_the_memory_limit_is_reported_as_memory():
    heavy = policy_with("s = 0", "for i in range(40):", "    s = s + nearest(obs.allies, point(s, i)).hp")
    with pytest.raises(ProgramError) as info:
        compile_program(heavy, memory_mb=1)
    assert info.value.kind == "memory", str(info.value)
    assert callable(compile_program(policy_with()).policy)


def test_the_cpu_limit_kills_a_busy_worker():
    # The sandbox refuses every program that could spin, so the limit itself is shown on a busy loop
    # armed exactly as the worker arms it per request.
    code = "from jaxarena.coder.compile import _limit\n_limit(0.5, 512)\nwhile True:\n    pass\n"
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -signal.SIGXCPU


def test_program_error_kinds_are_checked():
    with pytest.raises(ValueError, match="unknown ProgramError kind"):
        ProgramError("oops", "message")
