"""Finding the program in an LLM reply (`jaxarena.coder.extract`)."""

from __future__ import annotations

import pytest

from jaxarena.coder.extract import extract_code, fenced_blocks

RUSH = "def policy(obs):\n    if obs.bot.can_attack:\n        return MELEE\n    return MOVE_TO_BOT\n"


def test_a_fenced_python_block_is_the_program():
    reply = f"Here is my squad.\n\n```python\n{RUSH}```\n\nIt strikes when it can."
    assert extract_code(reply) == RUSH


@pytest.mark.parametrize("tag", ["python", "py", "Python", "python3", ""])
def test_fence_tags_that_count_as_code(tag):
    assert extract_code(f"```{tag}\n{RUSH}```") == RUSH


def test_the_last_block_that_defines_policy_wins():
    first = RUSH.replace("MOVE_TO_BOT", "RETREAT")
    reply = f"Draft:\n```python\n{first}```\nBetter:\n```python\n{RUSH}```\nUsage:\n```python\nx = 1\n```"
    assert extract_code(reply) == RUSH


def test_a_block_without_policy_is_still_code():
    """A python block that fails to define `policy` is a program that fails (-0.5), not a missing one (-1)."""
    reply = "```python\ndef act(obs):\n    return MELEE\n```"
    assert extract_code(reply) == "def act(obs):\n    return MELEE\n"


def test_a_fence_cut_off_by_the_token_limit_runs_to_the_end():
    reply = f"```python\n{RUSH}    # and then"
    assert extract_code(reply) == RUSH + "    # and then\n"


def test_bare_def_policy_with_helpers_and_constants_but_not_the_prose():
    reply = (
        "Sure. The plan is to strike.\n"
        "NEAR = 6.0\n"
        "def hurt(me):\n    return me.hp < 20\n\n"
        f"{RUSH}\n"
        "This walks in and strikes.\n"
    )
    code = extract_code(reply)
    assert code.startswith("NEAR = 6.0\ndef hurt(me):")
    assert code.rstrip().endswith("return MOVE_TO_BOT")
    assert "Sure" not in code and "This walks" not in code


@pytest.mark.parametrize(
    "reply",
    [None, "", "   \n", "I would rush the bot.", "Use MELEE when close.\n```text\nno code here\n```"],
)
def test_no_code_is_none(reply):
    assert extract_code(reply) is None


def test_fenced_blocks_lists_tags_and_bodies_in_order():
    blocks = fenced_blocks("a\n```python\nx = 1\n```\nb\n```\ny = 2\n```\n```js\nz\n")
    assert blocks == [("python", "x = 1\n"), ("", "y = 2\n"), ("js", "z\n")]
