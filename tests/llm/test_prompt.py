"""The Table 10 prompt and the one-digit parser, every branch."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxarena.llm.prompt import SYSTEM, build_prompt, format_state, parse_tag
from jaxarena.llm.types import Prompt, Reply
from jaxarena.names import FALLBACK_REASONS, NUM_TAGS, TAG_NAMES

USER_RE = re.compile(
    r"^Enemy bot HP: (\d+)/300\. Average NPC HP: (\d+)/60\. NPCs alive: (\d)/5\. "
    r"Bot moving: (yes|no)\. Nearest NPC distance: (\d+\.\d) units\.$"
)


def test_system_text_is_table_10():
    assert SYSTEM == (
        "You control a squad of NPC soldiers fighting an enemy bot. Choose the best "
        "squad tactic for the current situation.\n"
        "Reply with exactly one digit: 0 = Surround, 1 = Aggressive, 2 = Flank, 3 = Retreat."
    )
    assert TAG_NAMES == ("Surround", "Aggressive", "Flank", "Retreat")


def test_user_line_reads_like_a_person_wrote_it():
    prompt = build_prompt(245.0, 41.25, 4.0, 1.0, 6.34)
    assert isinstance(prompt, Prompt)
    assert prompt.system == SYSTEM
    assert prompt.user == (
        "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. "
        "Bot moving: yes. Nearest NPC distance: 6.3 units."
    )


def test_rounding_is_half_up_and_clamped():
    line = format_state(40.5, 41.5, 5, 0.0, 0.05)
    assert line.startswith("Enemy bot HP: 41/300. Average NPC HP: 42/60. NPCs alive: 5/5. Bot moving: no.")
    assert "distance: 0.1 units" in line or "distance: 0.0 units" in line
    assert format_state(-3.0, 0.0, 0, False, -1.0).startswith("Enemy bot HP: 0/300.")
    assert format_state(-3.0, 0.0, 0, False, -1.0).endswith("distance: 0.0 units.")


def test_max_values_are_parameters():
    line = format_state(100, 50, 3, True, 2.0, bot_max_hp=500, npc_max_hp=80, num_npcs=8)
    assert "Enemy bot HP: 100/500." in line
    assert "Average NPC HP: 50/80." in line
    assert "NPCs alive: 3/8." in line


@settings(deadline=None)  # a loaded CI machine must not fail on timing
@given(
    bot_hp=st.floats(0, 300, allow_nan=False),
    npc_hp=st.floats(0, 60, allow_nan=False),
    alive=st.integers(0, 5),
    moving=st.booleans(),
    dist=st.floats(0, 42.5, allow_nan=False),
)
def test_user_line_always_has_the_same_shape(bot_hp, npc_hp, alive, moving, dist):
    match = USER_RE.match(build_prompt(bot_hp, npc_hp, alive, float(moving), dist).user)
    assert match, build_prompt(bot_hp, npc_hp, alive, float(moving), dist).user
    assert int(match.group(1)) <= 300 and int(match.group(2)) <= 60
    assert int(match.group(3)) == alive
    assert match.group(4) == ("yes" if moving else "no")
    assert abs(float(match.group(5)) - dist) <= 0.05 + 1e-9


# --- parse_tag ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, tag, reason",
    [
        ("2", 2, None),
        ("0", 0, None),
        ("3 = Retreat", 3, None),
        ("  \n1", 1, None),  # leading whitespace is skipped
        ("", 7, "empty"),
        ("   \n\t", 7, "empty"),
        (None, 7, "empty"),
        ("Flank", 7, "non_numeric"),
        ("-1", 7, "non_numeric"),
        ("²", 7, "non_numeric"),  # a Unicode digit is not a tag
        ("٣", 7, "non_numeric"),
        ("4", 7, "out_of_range"),
        ("9 units", 7, "out_of_range"),
        ("12", 1, None),  # only the first character counts (Table 10)
    ],
)
def test_parse_tag_branches(text, tag, reason):
    assert parse_tag(text, 7) == (tag, reason)
    assert reason is None or reason in FALLBACK_REASONS


def test_parse_tag_backend_error_keeps_previous():
    assert parse_tag(Reply(text="", latency_s=40.0, error="timeout: 40.0 s"), 3) == (3, "error")
    # A Reply without an error is parsed like its text.
    assert parse_tag(Reply(text=" 1", latency_s=0.1), 3) == (1, None)
    assert parse_tag(Reply(text="", latency_s=0.1), 3) == (3, "empty")


@settings(deadline=None)
@given(text=st.text(max_size=20), previous=st.integers(0, NUM_TAGS - 1))
def test_parse_tag_total_and_consistent(text, previous):
    tag, reason = parse_tag(text, previous)
    assert 0 <= tag < NUM_TAGS
    stripped = text.lstrip()
    if reason is None:
        assert stripped[0] == str(tag)
    else:
        assert tag == previous
        expected = "empty" if not stripped else "non_numeric" if stripped[0] not in "0123456789" else "out_of_range"
        assert reason == expected and reason in FALLBACK_REASONS
