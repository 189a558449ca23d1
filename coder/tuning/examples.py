"""SFT examples for the coder: the white-box baselines and mutated variants, each with a plan it implements.

A variant is a baseline with its module constants scaled, with a clause put
first in `policy` (retreat when hurt, fire an orb at range), or both. Its
plan is what a planner would have written for it: the baseline's tactic in
its own words, then one sentence per change ("An NPC below 15 HP
retreats."), then the constants to use. Each variant must pass the sandbox
and compiler, and score no worse than the median of its baseline's family
(`score_sources`); the rest are dropped, as *SMAC-R1: The Emergence of
Intelligence in Decision-Making Tasks* filters generated code by the
compiler and the game.

The prompt is the coder's own (`prompts.coder_prompt`), the reply one
```python block, so an SFT example is exactly what the loop asks and what a
good reply looks like. A fixed share of the variants, drawn by the seed, is
held out: their plans are the evaluation prompts and their code is never
trained on.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np

from ..language import BASELINES

#: Scale factors for a baseline's module constants (each variant scales all of them by one factor).
FACTORS = (0.6, 0.8, 1.25, 1.5)
#: Clauses put first in `policy`: (code, the plan's sentence), with {value} filled from the list.
CLAUSES = {
    "retreat_hurt": (
        "    if obs.me.hp < {value:g}:\n        return RETREAT  # too hurt to trade blows\n",
        "An NPC with less than {value:g} HP retreats from the bot.",
        (10, 15, 20),
    ),
    "orb_at_range": (
        "    if obs.bot.distance < ORB_RANGE and obs.bot.distance > NPC_MELEE_RANGE and random() < {value:g}:\n"
        "        return RANGED  # chip at the bot on the way in\n",
        "Out of melee but within orb range, an NPC fires an orb with probability {value:g}.",
        (0.3, 0.6),
    ),
}
_CONSTANT = re.compile(r"^([A-Z][A-Z0-9_]*) = ([0-9.]+)(.*)$", re.MULTILINE)
_POLICY = re.compile(r"^def policy\(obs\):\n", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Example:
    """One program and the plan it implements; `name` says how it was made (e.g. kite+x0.8+retreat_hurt=15)."""

    name: str
    family: str
    plan: str
    code: str

    @property
    def reply(self) -> str:
        return f"```python\n{self.code.rstrip()}\n```"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def tactic_of(source: str) -> tuple[str, str]:
    """(name, description) from a baseline's module docstring: its title before the colon, then the rest."""
    doc = source.split('"""')[1].strip()
    title, _, rest = doc.partition("\n\n")
    name, _, summary = title.partition(":")
    return name.strip(), " ".join((summary.strip() + " " + rest.replace("\n", " ")).split())


def scale_constants(source: str, factor: float) -> tuple[str, dict[str, float]]:
    """The source with each module constant times `factor`, and the new values.

    A value the docstring quotes (kite's "keep 6-11 u") is rewritten there
    too, so the comments never contradict the code.
    """
    values, quoted = {}, {}

    def repl(m):
        old = float(m.group(2))
        new = round(old * factor, 2)
        values[m.group(1)] = new
        quoted[f"{old:g}"] = f"{new:g}"
        return f"{m.group(1)} = {new:g}{m.group(3)}"

    body = _CONSTANT.sub(repl, source)
    head, doc, rest = body.split('"""', 2)
    for old, new in quoted.items():
        doc = re.sub(rf"(?<![0-9.]){re.escape(old)}(?![0-9.])", new, doc)
    return f'{head}"""{doc}"""{rest}', values


def add_clause(source: str, code: str) -> str:
    """The source with `code` (indented statements) put first in `policy`'s body."""
    match = _POLICY.search(source)
    if match is None:
        raise ValueError("no `def policy(obs):` line to put the clause after")
    return source[: match.end()] + code + source[match.end() :]


def plan_text(name: str, description: str, changes: list[str], constants: dict[str, float]) -> str:
    """The plan a planner would write for the program, in the planner's own format."""
    skeleton = " ".join([description, *changes])
    if constants:
        skeleton += " Use " + ", ".join(f"{k} = {v:g}" for k, v in constants.items()) + "."
    return f"### Tactic 1: {name}\n**Condition to use:** always.\n**Tactic skeleton:** {skeleton}"


def variants() -> list[Example]:
    """Every baseline, and each with every constant factor and every clause (deterministic order)."""
    out = []
    for family, source in sorted(BASELINES.items()):
        name, description = tactic_of(source)
        # Every scaling (or none), each with no clause or one clause at one value.
        scalings = [(None, source, scale_constants(source, 1.0)[1])]
        if _CONSTANT.search(source):
            scalings += [(f, *scale_constants(source, f)) for f in FACTORS]
        clauses = [(None, None, None, None)] + [
            (key, v, code.format(value=v), sentence.format(value=v))
            for key, (code, sentence, values) in CLAUSES.items()
            for v in values
        ]
        for (factor, scaled, constants), (key, value, clause, sentence) in itertools.product(scalings, clauses):
            code = scaled if clause is None else add_clause(scaled, clause)
            label = family + ("" if factor is None else f"+x{factor:g}") + ("" if key is None else f"+{key}={value:g}")
            name, description = tactic_of(scaled)
            plan = plan_text(name, description, [sentence] if sentence else [], constants)
            out.append(Example(label, family, plan, code))
    return out


def split(examples: list[Example], held_out: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held out): a `held_out` share of the variants, drawn by `seed`; the baselines always train."""
    bases = [e for e in examples if "+" not in e.name]
    rest = [e for e in examples if "+" in e.name]
    order = np.random.default_rng(seed).permutation(len(rest))
    n_out = int(round(held_out * len(rest)))
    out = {int(i) for i in order[:n_out]}
    return bases + [e for i, e in enumerate(rest) if i not in out], [e for i, e in enumerate(rest) if i in out]


def keep_scored(examples: list[Example], rewards: list[float]) -> list[Example]:
    """The examples that ran (reward >= 0) and score at least their family's median among those."""
    ran = [(e, r) for e, r in zip(examples, rewards, strict=True) if r >= 0]
    kept = []
    for family in sorted({e.family for e, _ in ran}):
        scores = [r for e, r in ran if e.family == family]
        median = float(np.median(scores))
        kept += [e for e, r in ran if e.family == family and r >= median]
    return kept


def build_examples(out, *, held_out: float, seed: int, score_config, progress=print) -> tuple[list, list, dict]:
    """(train, held out, record): the split, with the training variants filtered by the compiler and scorer.

    The scores are kept in `out/examples.json` and reused when the same
    command runs again (the filter is the slow part: every variant plays).
    """
    import json
    from pathlib import Path

    from jaxarena.files import write_atomic

    from ..scoring import score_sources

    path = Path(out) / "examples.json"
    settings = {"held_out": held_out, "seed": seed, "score": dataclasses.asdict(score_config)}
    settings["score"]["bots"] = list(score_config.bots)
    train, held = split(variants(), held_out, seed)
    record = json.loads(path.read_text()) if path.exists() else None
    if record is None or record["settings"] != settings:
        progress(f"scoring {len(train)} training programs ({score_config.episodes_per_bot} episodes per bot)")
        rewards = [s.reward for s in score_sources([e.code for e in train], score_config)]
        record = {"settings": settings, "rewards": dict(zip([e.name for e in train], rewards, strict=True))}
        kept = keep_scored(train, rewards)
        record["kept"] = [e.name for e in kept]
        record["held_out"] = [e.name for e in held]
        Path(out).mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, indent=1))
    kept_names = set(record["kept"])
    return [e for e in train if e.name in kept_names], held, record
