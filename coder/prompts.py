"""The planner, coder and critic prompts of SMAC-R1 (§3, Appendix A), adapted to the arena.

- planner: plans at most 3 tactics (skills) from the task (unit stats and
  arena layout read from `EnvParams`), the last results and the skill
  history with each skill's score r_i (the running mean of its rollout
  scores, eq. 4). Answers "### Tactic N: NAME" sections.
- coder: writes the program in the squad-policy language; its prompt embeds
  the language reference (`language.reference_text()`), the tactics, and,
  when fixing, the critic's suggestion and the code it reviewed.
- critic: reads the code (with line numbers, as the errors cite them), the
  result (the error, or per-bot win/loss/timeout counts, damage dealt and
  taken, episode length and action usage), and ends with [Change Tactic]
  (re-plan) or [Improve Tactic] (fix the code).

Each system prompt starts with "Role: planner|coder|critic." so that a test
server can answer by role (`jaxarena.llm.testing.responders`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from jaxarena.llm.types import Prompt
from jaxarena.names import BOT_TYPES
from jaxarena.types import EnvParams

from .score_types import Score

PLANNER, CODER, CRITIC = "planner", "coder", "critic"
CHANGE, IMPROVE = "change", "improve"
#: The critic's two answers (SMAC-R1, Table 9) and what the loop does next.
DECISIONS = {"[Change Tactic]": CHANGE, "[Improve Tactic]": IMPROVE}

_BOTS = {
    "aggressive": "chases the nearest living NPC and strikes whatever is in its melee range",
    "evasive": "runs from the nearest NPC, sliding along walls and round boxes; strikes only what is in range",
    "balanced": (
        "alternates aggressive and evasive phases of 6-18 s; the more hurt it is, the shorter it attacks and "
        "the longer it runs"
    ),
}


def task_information(
    params: EnvParams, scenario: str = "paper", episodes_per_bot: int = 1000, bots: Sequence[str] = BOT_TYPES
) -> str:
    """Units, arena and task (SMAC-R1's TASK INFORMATION), read from the scenario's `EnvParams`."""
    p = {k: np.asarray(v).tolist() for k, v in vars(params).items()}
    boxes = "; ".join(f"({b[0]:g}, {b[1]:g})-({b[2]:g}, {b[3]:g})" for b in p["boxes"])
    ns, bs = p["npc_spawn"], p["bot_spawn"]
    cleave = " Its melee strikes every NPC within range at once (cleave)." if p["bot_cleave"] > 0.5 else ""
    lines = [
        f"Scenario {scenario!r}. The arena is a {p['arena_size']:g} x {p['arena_size']:g} u square "
        "(x east, z north), walled, with these boxes (x_min, z_min)-(x_max, z_max), which block movement "
        f"and orbs: {boxes}.",
        f"You control 5 NPCs (a squad), which start at random in ({ns[0]:g}, {ns[1]:g})-({ns[2]:g}, {ns[3]:g}) "
        f"(south). One enemy bot starts in ({bs[0]:g}, {bs[1]:g})-({bs[2]:g}, {bs[3]:g}) (north).",
        f"Each NPC: {p['npc_hp']:g} HP, speed {p['npc_speed']:g} u/s, melee range {p['npc_melee_range']:g} u, "
        f"melee damage {p['npc_melee_damage']:g}, melee cooldown {p['npc_melee_cooldown']:g} s; orbs: range "
        f"{p['orb_range']:g} u, speed {p['orb_speed']:g} u/s, damage {p['orb_damage']:g}, cooldown "
        f"{p['orb_cooldown']:g} s, at most 2 in flight.",
        f"The bot: {p['bot_hp']:g} HP, speed {p['bot_speed']:g} u/s, melee range {p['bot_melee_range']:g} u, "
        f"melee damage {p['bot_melee_damage']:g}, melee cooldown {p['bot_melee_cooldown']:g} s; no ranged attack."
        + cleave,
        "Every NPC picks one of six actions every tick (0.1 s): move to the bot, strafe left or right round it, "
        "melee, retreat, or fire an orb. Units have no other abilities.",
        f"You win when the bot's HP reaches 0; you lose when all 5 NPCs are down; after {p['episode_s']:g} s it "
        "is a tie (timeout).",
        f"The policy is played {episodes_per_bot} times against each of these scripted bots, and scored by its "
        "mean win rate over them:",
        *(f"- {name}: {_BOTS[name]}." for name in bots),
    ]
    return "\n".join(lines)


# --- results, as the planner and the critic read them --------------------------------------------


def describe_result(score: Score) -> str:
    """The rollout result in words (SMAC-R1's RESULT): the error, or per-bot outcomes and statistics."""
    if score.status == "no_code":
        return "No program could be extracted from the reply (reward -1): answer with one ```python block."
    if score.status == "error":
        return f"The program failed (reward -0.5):\n{score.error}"
    n = score.episodes_per_bot
    lines = [f"Reward {score.reward:.3f} (mean win rate over the bots). Per bot, over {n} episodes each:"]
    for bot, s in score.stats.items():
        wins, losses, ties = (round(s[k] * n) for k in ("win", "loss", "timeout"))
        usage = ", ".join(f"{a} {100 * v:.0f}%" for a, v in s["action_share"].items())
        lines.append(
            f"- {bot}: you win {wins} times, tie {ties} times and lose {losses} times out of {n}; you give "
            f"{s['damage_dealt']:.0f} damage to the bot and take {s['damage_taken']:.0f} on average; episodes "
            f"last {s['episode_s']:.1f} s on average; actions used: {usage}."
        )
    return "\n".join(lines)


#: Caps on model-written text fed back into prompts (plans, suggestions, code): a rambling small model
#: must not push a prompt past a backend's context; the cut is marked.
MAX_TEXT_CHARS = 3000
MAX_CODE_CHARS = 4000


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a marker when longer."""
    return text if len(text) <= limit else text[:limit] + "\n[... cut: too long]"


def numbered(code: str) -> str:
    """The code with 1-based line numbers, as the sandbox's errors cite them."""
    return "\n".join(f"{i:3d} | {line}" for i, line in enumerate(code.splitlines(), 1))


# --- skills --------------------------------------------------------------------------------------

_TACTIC = re.compile(r"^\s*#{1,6}\s*Tactic\s*\d*\s*[:.)-]?\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_skills(plan: str) -> list[str]:
    """Skill names from the planner's "### Tactic N: NAME" headings (normalized); ["unnamed tactic"] if none."""
    names = []
    for match in _TACTIC.finditer(plan or ""):
        name = re.sub(r"[*_`'\"]", "", match.group(1))
        name = re.sub(r"\s+", " ", name).strip(" :.-").lower()
        if name and name not in names:
            names.append(name)
    return names[:3] or ["unnamed tactic"]


def describe_skills(skills: Mapping[str, Mapping[str, float]]) -> str:
    """The skill pool with each skill's score r_i and use count (SMAC-R1's h(s_i, r_i))."""
    if not skills:
        return "No tactics have been tried yet."
    rows = sorted(skills.items(), key=lambda kv: -kv[1]["r"])
    return "\n".join(f"- {name}: score r = {s['r']:.3f} over {s['n']} rollouts" for name, s in rows)


# --- the three prompts ---------------------------------------------------------------------------

PLANNER_SYSTEM = """Role: planner.
You are a player of a small real-time combat game and a helpful assistant, facing a micro-management task. \
I will describe the arena and the units. You control a squad of 5 NPCs against one scripted enemy bot; \
you cannot build or add units. You may use micro-management tactics such as focus fire, kiting, hit and run, \
surrounding, flanking, spreading out, retreating when hurt, using the boxes as cover, or any combination.
Give the tactics in this format:
### Tactic 1: <name>
**Condition to use:** <when this tactic applies>
**Tactic skeleton:** <what each NPC does, step by step>
### Tactic 2: <name>
...
I will also tell you the tactics tried so far with their scores; you may add a new tactic to one of them \
or try a new one. Give at most 3 tactics, describe each skeleton in detail for the units and the enemy \
described, and state its condition to use. Make sure the conditions do not conflict: each NPC must know \
which tactic it follows."""


def planner_prompt(
    task: str,
    skills: Mapping[str, Mapping[str, float]],
    history: Sequence[tuple[str, float]] = (),
    last: Score | None = None,
) -> Prompt:
    """SMAC-R1's planner input (Table 6): last results, skills with r_i, past strategies and rewards.

    The task is fixed for a run, so it goes in the system prompt (a backend's shared, cached prefix).
    """
    parts = []
    if last is not None:
        parts.append(f"The result of the last strategy's best program:\n{describe_result(last)}")
    parts.append(
        f"The tactics tried so far and their scores r (running mean of rollout win rates):\n{describe_skills(skills)}"
    )
    if history:
        parts.append(
            "The past strategies and their best rewards:\n"
            + "\n".join(f"- {', '.join(names)}: {best:.3f}" for names, best in history)
        )
    parts.append(
        "To improve the win rate, change to a new tactic or add tactics to one of the strategies above. "
        "Give at most 3 tactics."
    )
    return Prompt(f"{PLANNER_SYSTEM}\n\nThe task:\n{task}", "\n\n".join(parts))


def coder_system(reference: str, task: str) -> str:
    return (
        "Role: coder.\n"
        "You are a player of a small real-time combat game and a helpful assistant, facing a micro-management "
        "task. I will give you the tactics to implement. Implement them as a squad policy in the squad-policy "
        "language below: a restricted Python subset with its own helpers, translated into a fast compiled "
        "function and run for every NPC on every tick. Use only what the reference lists; there are no imports. "
        "Write one `def policy(obs):` that returns one of the six action names, with short comments that explain "
        "the decisions. Put the whole program in one ```python block.\n\n"
        f"# The task\n\n{task}\n\n# The squad-policy language\n\n{reference}"
    )


def coder_prompt(
    reference: str,
    task: str,
    plan: str,
    candidate: int,
    candidates: int,
    suggestion: str | None = None,
    previous_code: str | None = None,
) -> Prompt:
    """SMAC-R1's coder input (Table 8): the critic's suggestion and the code it read (when fixing), the tactics."""
    parts = []
    if suggestion:
        if previous_code:
            parts.append(f"The previous program:\n```python\n{clip(previous_code, MAX_CODE_CHARS).rstrip()}\n```")
        parts.append(f"The suggestion from the critic:\n{clip(suggestion, MAX_TEXT_CHARS).strip()}")
    parts.append(f"The tactics from the planner:\n{clip(plan, MAX_TEXT_CHARS).strip()}")
    parts.append(
        f"You are writing candidate {candidate} of {candidates} for these tactics; candidates may differ in their "
        "details and numbers. Every path of `policy` must return an action. Please implement the code for me."
    )
    return Prompt(coder_system(reference, task), "\n\n".join(parts))


CRITIC_SYSTEM = """Role: critic.
You are a player of a small real-time combat game and a helpful assistant, facing a micro-management task. \
You are now working as a critic. I will describe the arena and the units, then give you the tactics and the \
program that implements them (in the squad-policy language, a restricted Python subset), and the program's \
result: an error message with the line number, or the combat results against each bot. \
Concentrate on the micro-management strategy to defeat the bot and keep the NPCs alive. Analyse why the code \
leads to the result and tell me how to improve it: you can suggest improving the current tactic or dropping \
some of it. Do not write the revised code. End with exactly one of [Change Tactic] (plan new tactics) or \
[Improve Tactic] (keep the tactics and fix or refine the code)."""


def critic_prompt(
    task: str, plan: str, code: str | None, score: Score, round_index: int, others: Sequence[Score] = ()
) -> Prompt:
    """SMAC-R1's critic input (Table 10): tactics, the code with line numbers, the result (the task: system)."""
    parts = [f"Round {round_index}.", f"The tactics:\n{clip(plan, MAX_TEXT_CHARS).strip()}"]
    if code:
        parts.append(f"The program:\n```\n{numbered(clip(code, MAX_CODE_CHARS))}\n```")
    else:
        parts.append("The reply contained no program.")
    parts.append(f"The result:\n{describe_result(score)}")
    if others:
        parts.append(
            "The other candidates of this round scored: "
            + ", ".join(f"{s.reward:.3f} ({s.status})" for s in others)
            + "."
        )
    parts.append(
        "Summarize why the code caused the result. Briefly give the 1 most important refinement, aimed at "
        "defeating the bot more often. Do not show revised code. Then give [Change Tactic] or [Improve Tactic]."
    )
    return Prompt(f"{CRITIC_SYSTEM}\n\nThe task:\n{task}", "\n\n".join(parts))


def parse_decision(reply: str) -> tuple[str, bool]:
    """(CHANGE or IMPROVE, whether the reply said so): the last marker wins; none: IMPROVE (the code is fixed)."""
    found = [(m.start(), DECISIONS[m.group(0)]) for m in re.finditer(r"\[(Change|Improve) Tactic\]", reply or "")]
    if not found:
        return IMPROVE, False
    return max(found)[1], True
