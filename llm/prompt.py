"""The paper's Table 10 prompt, and the parser for the one-digit reply.

The prompt is split in two (see `types.Prompt`): the fixed `SYSTEM` text (role
and action instruction, identical for every decision, so backends can reuse its
KV cache) and a one-line `user` state description, which is the only part that
changes from one decision to the next.

The parser follows Table 10: the first character of the reply is the tag;
empty, non-numeric or out-of-range output keeps the previous tag and is
reported as a fallback so that it can be logged and counted.
"""

from __future__ import annotations

import math

from jaxarena.names import BOT_MAX_HP, NPC_MAX_HP, NUM_NPCS, NUM_TAGS, TAG_NAMES

from .types import Prompt, Reply

#: Role + action instruction (Table 10, rows "Role" and "Action").
SYSTEM: str = (
    "You control a squad of NPC soldiers fighting an enemy bot. "
    "Choose the best squad tactic for the current situation.\n"
    "Reply with exactly one digit: " + ", ".join(f"{i} = {name}" for i, name in enumerate(TAG_NAMES)) + "."
)


def _whole(x: float) -> int:
    """Rounds half up and clamps at 0, so HP reads as a whole, non-negative number.

    Python's `round` rounds half to even (40.5 -> 40, 41.5 -> 42), which reads
    oddly in a prompt; half-up is what a person would write.
    """
    return max(0, int(math.floor(float(x) + 0.5)))


def format_state(
    bot_hp: float,
    avg_npc_hp: float,
    npcs_alive: float,
    bot_moving: float | bool,
    nearest_distance: float,
    *,
    bot_max_hp: float = BOT_MAX_HP,
    npc_max_hp: float = NPC_MAX_HP,
    num_npcs: int = NUM_NPCS,
) -> str:
    """Writes the five state values of Table 10 the way a person would read them.

    Example: "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5.
    Bot moving: yes. Nearest NPC distance: 6.3 units." (one line).
    HP values are whole numbers; the distance has one decimal.
    """
    distance = max(0.0, float(nearest_distance))
    moving = "yes" if float(bot_moving) > 0.5 else "no"
    return (
        f"Enemy bot HP: {_whole(bot_hp)}/{_whole(bot_max_hp)}. "
        f"Average NPC HP: {_whole(avg_npc_hp)}/{_whole(npc_max_hp)}. "
        f"NPCs alive: {_whole(npcs_alive)}/{int(num_npcs)}. "
        f"Bot moving: {moving}. "
        f"Nearest NPC distance: {distance:.1f} units."
    )


def build_prompt(
    bot_hp: float,
    avg_npc_hp: float,
    npcs_alive: float,
    bot_moving: float | bool,
    nearest_distance: float,
    *,
    bot_max_hp: float = BOT_MAX_HP,
    npc_max_hp: float = NPC_MAX_HP,
    num_npcs: int = NUM_NPCS,
) -> Prompt:
    """Builds the Table 10 prompt for one decision.

    Arguments are in the order of `jaxarena.llm_features`: bot HP and average
    living-NPC HP in HP points, the number of living NPCs, whether the bot moves
    (truthy / > 0.5) and the nearest NPC's distance in arena units.
    """
    user = format_state(
        bot_hp,
        avg_npc_hp,
        npcs_alive,
        bot_moving,
        nearest_distance,
        bot_max_hp=bot_max_hp,
        npc_max_hp=npc_max_hp,
        num_npcs=num_npcs,
    )
    return Prompt(system=SYSTEM, user=user)


def parse_tag(reply: Reply | str | None, previous: int) -> tuple[int, str | None]:
    """Turns a reply into a tag, keeping `previous` when the reply is unusable.

    Returns `(tag, fallback_reason)`, where the reason is None for a valid reply
    and otherwise one of `jaxarena.names.FALLBACK_REASONS`:
      - "error": the backend returned no text (timeout, HTTP error, ...);
      - "empty": nothing but whitespace came back;
      - "non_numeric": the first non-space character is not an ASCII digit;
      - "out_of_range": it is a digit, but not a tag (4-9).
    Only the first non-space character is read (Table 10), so "2, flank" is 2.
    """
    if isinstance(reply, Reply):
        if reply.error is not None:
            return previous, "error"
        text = reply.text
    else:
        text = reply
    stripped = (text or "").lstrip()
    if not stripped:
        return previous, "empty"
    first = stripped[0]
    # str.isdigit would accept characters such as "²" or "٣"; only ASCII counts.
    if first not in "0123456789":
        return previous, "non_numeric"
    tag = ord(first) - ord("0")
    if tag >= NUM_TAGS:
        return previous, "out_of_range"
    return tag, None
