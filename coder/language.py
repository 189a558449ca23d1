"""The squad-policy language: its vocabulary (actions, observation fields, constants), its reference and baselines.

A program is a restricted Python subset, parsed and never executed
(`sandbox.check_program`), and translated into JAX ops (`translate`). The
vocabulary lives here, the helpers with their docs in `helpers.HELPERS`, the
size limits in `limits`; `reference_text()` renders all of them, and is
both the coder's prompt and the reference in docs/coder.md.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math

from jaxarena.names import MELEE, MOVE_TO_BOT, NUM_NPCS, RANGED, RETREAT, STRAFE_LEFT, STRAFE_RIGHT
from jaxarena.types import EnvParams

from . import limits

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EnvParams) if isinstance(f.default, (int, float))}
_NPC_STEP = _DEFAULTS["npc_speed"] * _DEFAULTS["dt"]

#: Action names, their codes (jaxarena.names) and what each does in one tick.
ACTIONS = {
    "MOVE_TO_BOT": (MOVE_TO_BOT, f"step {_NPC_STEP:g} u straight towards the bot"),
    "STRAFE_LEFT": (
        STRAFE_LEFT,
        f"step {_NPC_STEP:g} u to the left while facing the bot: clockwise round it (bearing(obs.bot, obs.me) falls)",
    ),
    "STRAFE_RIGHT": (
        STRAFE_RIGHT,
        f"step {_NPC_STEP:g} u to the right: counter-clockwise round the bot (bearing(obs.bot, obs.me) rises)",
    ),
    "MELEE": (
        MELEE,
        f"strike the bot for {_DEFAULTS['npc_melee_damage']:g} HP; lands only when obs.bot.can_attack "
        f"(within {_DEFAULTS['npc_melee_range']:g} u, {_DEFAULTS['npc_melee_cooldown']:g} s cooldown ready); "
        "no move",
    ),
    "RETREAT": (RETREAT, f"step {_NPC_STEP:g} u straight away from the bot"),
    "RANGED": (
        RANGED,
        f"fire an orb at the bot's position ({_DEFAULTS['orb_damage']:g} HP, flies {_DEFAULTS['orb_range']:g} u "
        f"at {_DEFAULTS['orb_speed']:g} u/s, stopped by boxes, {_DEFAULTS['orb_cooldown']:g} s cooldown, 2 in flight "
        "at most; the cooldown is not observed and a shot on cooldown wastes the tick); no move",
    ),
}

#: Named constants a program may read (the default `Arena-v0` numbers).
CONSTANTS = {
    "PI": (math.pi, "pi"),
    "ARENA_SIZE": (_DEFAULTS["arena_size"], "the arena is ARENA_SIZE x ARENA_SIZE u, x east, z north"),
    "NPC_SPEED": (_DEFAULTS["npc_speed"], "u/s of an NPC"),
    "BOT_SPEED": (_DEFAULTS["bot_speed"], "u/s of the bot"),
    "NPC_MELEE_RANGE": (_DEFAULTS["npc_melee_range"], "u; an NPC's melee lands within it"),
    "BOT_MELEE_RANGE": (_DEFAULTS["bot_melee_range"], "u; the bot's melee lands within it"),
    "ORB_RANGE": (_DEFAULTS["orb_range"], "u an orb flies before it vanishes"),
    "NPC_MAX_HP": (_DEFAULTS["npc_hp"], "HP of a fresh NPC"),
    "BOT_MAX_HP": (_DEFAULTS["bot_hp"], "HP of a fresh bot"),
}

#: The records a program reads, their fields and meanings (units: u for distances, HP for health).
FIELDS = {
    "obs": {
        "index": f"this NPC's index, 0..{NUM_NPCS - 1} (a number; use it to give NPCs different roles)",
        "tag": "the strategy tag 0..3 (0 unless a tag source sets one)",
        "me": "this NPC (a unit)",
        "bot": "the enemy bot",
        "cover": "the nearest point of the nearest box (obstacle)",
        "allies": f"the {NUM_NPCS - 1} other NPCs in index order (a list of units; dead ones have hp 0)",
    },
    "me": {"x": "east position, 0..30", "z": "north position, 0..30", "hp": "0..60", "alive": "hp > 0"},
    "bot": {
        "x": "east position",
        "z": "north position",
        "hp": "0..300",
        "distance": "distance from this NPC",
        "can_attack": "true when this NPC's MELEE would land now",
        "alive": "hp > 0",
    },
    "cover": {"x": "east position", "z": "north position", "distance": "distance from this NPC"},
    "ally": {
        "x": "east position",
        "z": "north position",
        "hp": "0..60",
        "alive": "hp > 0",
        "index": "its NPC index 0..4",
        "distance": "distance from this NPC",
    },
    "point": {"x": "east position", "z": "north position"},
}
FIELD_NAMES = frozenset(name for fields in FIELDS.values() for name in fields)

# How the program is run, and what the sandbox refuses; limits are read from `limits`.
RULES = (
    "Write one function `def policy(obs):` that returns one of the six action names. It is run for each "
    "of the 5 NPCs on every tick (0.1 s), with `obs` seen from that NPC; the squad shares the program, "
    "and `obs.index` tells the NPCs apart.",
    "Numbers are float32; `/` is true division, `//` and `%` floor like Python's; dividing by a non-constant "
    "zero gives inf or nan, not an error.",
    "Allowed: assignments (`x = ...`, `x += ...`), arithmetic, comparisons (chains too), `and`/`or`/`not`, "
    "`a if c else b`, `if`/`elif`/`else`, `return`, `pass`, `for i in range(N)` with a constant "
    f"N <= {limits.MAX_UNROLL}, `for a in obs.allies`, `obs.allies[i]` with a constant or loop index, "
    "comments and docstrings.",
    "`if` conditions are computed per NPC, so both branches are evaluated and the results selected; "
    "`and`/`or` always give true/false and evaluate both sides.",
    "Every path must end in a `return` of an action, and a variable used after an `if` must be assigned "
    "before it or in every branch.",
    f"You may define up to {limits.MAX_FUNCTIONS - 1} helper functions at the top level (`def name(a, b):`, "
    "positional arguments only, every path returning a value; no recursion) and constants (`NEAR = 6.0`).",
    "Not allowed: imports, while, break/continue, lambda, comprehensions, classes, try, with, global, "
    "strings (other than docstrings), lists/tuples/dicts, keyword arguments, names containing `__`, "
    "and any name, field or function not listed here.",
    f"Limits: {limits.MAX_SOURCE_BYTES:,} bytes, {limits.MAX_LINES} lines, {limits.MAX_AST_NODES:,} syntax "
    f"nodes, number literals up to {limits.MAX_CONSTANT:,}.",
)

EXAMPLE = '''\
def policy(obs):
    """Strike when it lands, keep the orb range otherwise, pull back when hurt."""
    if obs.bot.can_attack:
        return MELEE
    if obs.me.hp < 20 and obs.bot.distance < BOT_MELEE_RANGE + 1:
        return RETREAT
    if obs.bot.distance < ORB_RANGE - 2 and random() < 0.5:
        return RANGED
    return MOVE_TO_BOT
'''


def reference_text() -> str:
    """The language reference in markdown: rules, actions, fields, constants, helpers and an example."""
    from .helpers import HELPERS  # JAX-backed; imported here so the vocabulary above loads without it

    out = ["### Rules", ""]
    out += [f"- {rule}" for rule in RULES]
    out += ["", "### Actions (return one)", ""]
    out += [f"- `{name}`: {doc}" for name, (_, doc) in ACTIONS.items()]
    out += ["", "### The observation `obs` (units: u for distances, HP for health)", ""]
    for name, doc in FIELDS["obs"].items():
        out.append(f"- `obs.{name}`: {doc}")
    for kind, label in (("me", "obs.me"), ("bot", "obs.bot"), ("cover", "obs.cover"), ("ally", "each ally")):
        fields = ", ".join(f"`.{f}` ({doc})" for f, doc in FIELDS[kind].items())
        out.append(f"- {label}: {fields}")
    out += ["", "### Constants", ""]
    out += [f"- `{name}` = {value:g}: {doc}" for name, (value, doc) in CONSTANTS.items()]
    out += ["", "### Helpers", ""]
    out += [f"- `{h.signature}` -> {h.returns}: {h.doc}" for h in HELPERS.values()]
    out += ["", "### Example", "", "```python", EXAMPLE.rstrip("\n"), "```", ""]
    return "\n".join(out)


def _load_baselines() -> dict[str, str]:
    folder = importlib.resources.files("jaxarena.coder").joinpath("baselines")
    return {
        entry.name[: -len(".py")]: entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py")
    }


#: The white-box baselines (coder/baselines/*.py), name -> source.
BASELINES: dict[str, str] = _load_baselines()
