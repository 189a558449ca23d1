"""The program in an LLM's reply: a fenced python block, else a bare `def policy`; None when there is none.

    extract_code("Here it is:\\n```python\\ndef policy(obs):\\n    return MELEE\\n```")  # -> "def policy(obs):..."

Rules, in order:

1. Fenced blocks (```python, ```py, or a bare ``` fence). The last block
   that defines `policy` wins (a model that revises itself ends with its
   final version); if none defines it, the last python-tagged block (it is
   still code, so it scores -0.5 when it fails, not -1). A fence left open
   at the end of the reply (generation cut off by the token limit) runs to
   the end.
2. No fenced block: the text from the first top-level `def`, or the
   constants just above it, through the end of `def policy`'s body.
3. Otherwise None (reward -1 in `scoring`).

Extraction never judges the code: `compile_program` does.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.MULTILINE)
_DEFINES_POLICY = re.compile(r"^def[ \t]+policy[ \t]*\(", re.MULTILINE)
_TOP_DEF = re.compile(r"^def[ \t]+\w+[ \t]*\(")
_TOP_CONSTANT = re.compile(r"^[A-Z_][A-Z0-9_]*[ \t]*=")
_PYTHON_TAGS = {"python", "py", "python3"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block, in order; an unclosed last fence runs to the end."""
    blocks = []
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        body_start = opening.end() + 1
        if i + 1 < len(fences):
            closing = fences[i + 1]
            blocks.append((opening.group(1).lower(), text[body_start : closing.start()]))
            i += 2
        else:
            blocks.append((opening.group(1).lower(), text[body_start:]))
            i += 1
    return blocks


def _bare_program(text: str) -> str | None:
    """The top-level definitions around `def policy` in unfenced text, or None."""
    lines = text.splitlines()
    policy_at = next((i for i, line in enumerate(lines) if _DEFINES_POLICY.match(line)), None)
    if policy_at is None:
        return None
    # Walk up over code that belongs with it: helper defs and their bodies, constants, comments, blanks.
    start = policy_at
    i = policy_at - 1
    while i >= 0:
        line = lines[i]
        if not line.strip() or line.startswith((" ", "\t", "#")) or _TOP_DEF.match(line) or _TOP_CONSTANT.match(line):
            if _TOP_DEF.match(line) or _TOP_CONSTANT.match(line):
                start = i
            i -= 1
            continue
        break
    # Down to the end of policy's body: indented or blank lines; a later top-level def is a helper.
    end = policy_at + 1
    while end < len(lines):
        line = lines[end]
        if not line.strip() or line.startswith((" ", "\t")) or _TOP_DEF.match(line):
            end += 1
            continue
        break
    return "\n".join(lines[start:end]).strip("\n") + "\n"


def extract_code(reply: str | None) -> str | None:
    """The program in `reply` (see the module docstring), or None when the reply holds no code."""
    if not reply or not reply.strip():
        return None
    blocks = fenced_blocks(reply)
    code = [body for tag, body in blocks if tag in _PYTHON_TAGS or not tag]
    with_policy = [body for body in code if _DEFINES_POLICY.search(body)]
    if with_policy:
        return with_policy[-1].strip("\n") + "\n"
    tagged = [body for tag, body in blocks if tag in _PYTHON_TAGS and body.strip()]
    if tagged:
        return tagged[-1].strip("\n") + "\n"
    return _bare_program(reply)
