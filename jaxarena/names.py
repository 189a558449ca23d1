"""The project's shared vocabulary: names, codes and paper constants, with no JAX.

Everything here is plain Python so that the LLM layer, the report writer and
command-line parsing can name tags, bots and outcomes without importing JAX
(`import jaxarena.names` loads no array library). The arena's `EnvParams`
takes its defaults from the constants below, so a number such as the bot's
300 HP is written once.
"""

from __future__ import annotations

import operator

NUM_NPCS = 5

# Table 4: the six actions, by code.
ACTIONS = ("move_to_bot", "strafe_left", "strafe_right", "melee", "retreat", "ranged")
NUM_ACTIONS = len(ACTIONS)
MOVE_TO_BOT, STRAFE_LEFT, STRAFE_RIGHT, MELEE, RETREAT, RANGED = range(NUM_ACTIONS)

# Table 5: the strategy tags, by code. `TAGS` are identifiers, `TAG_NAMES` what the prompt and report print.
TAGS = ("surround", "aggressive", "flank", "retreat")
TAG_NAMES = ("Surround", "Aggressive", "Flank", "Retreat")
NUM_TAGS = len(TAGS)
SURROUND, AGGRESSIVE, FLANK, RETREAT_TAG = range(NUM_TAGS)

# The three scripted bots of the paper's evaluation, by `EnvParams.bot_type` code.
BOT_TYPES = ("aggressive", "evasive", "balanced")
BOT_AGGRESSIVE, BOT_EVASIVE, BOT_BALANCED = range(len(BOT_TYPES))
# A learned bot (`jaxarena.learned_bot`), run from `EnvParams.bot_weights`. Not in
# BOT_TYPES: those are the paper's three, which reports and evaluations iterate.
BOT_LEARNED = len(BOT_TYPES)

# Episode outcomes as the env reports them in `info["outcome"]`.
OUTCOMES = ("running", "npc_win", "bot_win", "timeout")
RUNNING, NPC_WIN, BOT_WIN, TIMEOUT = range(len(OUTCOMES))

# Why a reply did not give a tag (Table 10 keeps the previous tag and logs the reason).
FALLBACK_REASONS = ("empty", "non_numeric", "out_of_range", "error")

# The Table 10 state the LLM reads, in the order `jaxarena.observe.llm_features` returns it.
LLM_FEATURES = ("bot_hp", "avg_npc_hp", "npcs_alive", "bot_moving", "nearest_npc_distance")

# Paper constants that code outside the arena needs as plain numbers (the
# arena reads them through `EnvParams`, whose defaults these are).
BOT_MAX_HP = 300.0  # Table 1
NPC_MAX_HP = 60.0  # Table 1
EPISODE_S = 120.0  # §Eval: the timeout
DECISION_PERIOD_S = 5.0  # Table 10: the LLM is asked every 5 s
DT = 0.1  # one tick of game time (docs/arena.md)


def bot_index(bot: str | int) -> int:
    """The `bot_type` code of a bot given by name ("balanced") or code (2)."""
    return _code(bot, BOT_TYPES, "bot")


def tag_index(tag: str | int) -> int:
    """The code of a strategy tag given by name ("flank", "Flank") or code (2)."""
    return _code(tag, TAGS, "tag")


def _code(value: str | int, names: tuple[str, ...], what: str) -> int:
    if isinstance(value, str):
        if value.lower() in names:
            return names.index(value.lower())
        raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(names)}")
    try:
        code = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        code = None
    if code is None or not 0 <= code < len(names):
        raise ValueError(f"{what} must be one of {names} or an index 0..{len(names) - 1}, got {value!r}")
    return code
