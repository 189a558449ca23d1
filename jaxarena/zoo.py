"""The policy zoo: every squad the project ships or can name, loaded by one spec syntax.

    from jaxarena import zoo
    policy = zoo.load("A-raid")           # a shipped name (archived ones too), or
    zoo.load("runs/a")                    # a run directory, "scripted:focus_fire", "coder:kite"
    actions = policy.fn(policy.params, obs, key)
    env, env_params = jaxarena.make(policy.env_id, scenario=policy.scenario, **policy.shaping)
    zoo.list(kind="squad", status="recommended")   # the cards (`jaxarena.zoo_cards.Card`)
    print(zoo.table(status="recommended"))         # markdown

The protocol resolves its policy specs through `load` (`jaxarena.protocol.policies.resolve_policy`),
so a spec means the same thing everywhere. A policy's checksum is the sha256 of its checkpoint
directory without its card (`directory_checksum`), of its spec for a scripted squad and of its
source for a white-box baseline: what a stored protocol cell is fingerprinted with.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .zoo_cards import CARD_FILE, KINDS, STATUSES, Card, CardError, WinRate, cards, read_card
from .zoo_cards import table as _table

__all__ = ["KINDS", "STATUSES", "Card", "CardError", "Policy", "UnknownPolicy", "WinRate", "list", "load", "table"]

DEFAULT_ENV_ID = "Arena-v0"
DEFAULT_SCENARIO = "paper"


class UnknownPolicy(FileNotFoundError, ValueError):
    """A spec that names no squad. A ValueError (a wrong name) and, as before the zoo, a FileNotFoundError."""


@dataclass(frozen=True, eq=False)
class Policy:
    """A loaded squad: `fn(params, obs, key) -> actions`, the arena it reads (`env_id`, `scenario`),
    the `jaxarena.make` overrides that log the return it trained on (`shaping`), and where it came from."""

    fn: Callable = field(repr=False)
    params: Any = field(repr=False)
    env_id: str
    scenario: str
    shaping: dict = field(repr=False)
    checksum: str
    source: str
    card: Card | None = field(default=None, repr=False)


def env_id_of(fn: Callable) -> str:
    """The arena variant a policy function plays on: its `env_id`, else "Arena-v0" (scripted squads)."""
    return getattr(fn, "env_id", DEFAULT_ENV_ID)


def shaping_of(fn: Callable) -> dict:
    """The `jaxarena.make` overrides that log the return a tag-playing policy trained on: its recipe's
    shaping at its weight (`fn.recipe`, `fn.shaping_weight`), else Table 5's at weight 1."""
    from jaxarena.algorithms.config import RECIPES

    recipe = getattr(fn, "recipe", "paper")
    return {"shaping_weight": getattr(fn, "shaping_weight", 1.0), "shaping_recipe": RECIPES.index(recipe)}


def directory_checksum(directory: str | os.PathLike) -> str:
    """sha256 over a directory's files (relative path + contents), in sorted order, its card left out:
    the card describes the weights, and correcting it must not invalidate cells played with them."""
    root = Path(directory)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() != CARD_FILE):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _policy(fn: Callable, params: Any, checksum: str, source: str, card: Card | None = None) -> Policy:
    scenario = getattr(fn, "scenario", DEFAULT_SCENARIO)
    return Policy(fn, params, env_id_of(fn), scenario, shaping_of(fn), checksum, source, card)


def _scripted(name: str, greedy: bool) -> Policy:
    from jaxarena.policies import SCRIPTED

    if name not in SCRIPTED:
        raise UnknownPolicy(f"unknown scripted policy {name!r}; choose from {sorted(SCRIPTED)}")
    spec = f"scripted:{name}"
    return _policy(SCRIPTED[name], None, "sha256:" + hashlib.sha256(spec.encode()).hexdigest(), spec)


def _baseline(name: str, greedy: bool) -> Policy:
    """A white-box baseline translated in this process: its source ships with the package and is
    tested, so the resource-limited subprocess of `compile_program` (meant for an LLM's code) would
    only add a second JAX start-up; `translate` still applies the sandbox's checks. The checksum is
    the source's, so editing a baseline invalidates its stored cells."""
    from jaxarena.coder.language import BASELINES
    from jaxarena.coder.translate import translate

    if name not in BASELINES:
        raise UnknownPolicy(f"unknown white-box baseline {name!r}; choose from {sorted(BASELINES)}")
    source = BASELINES[name]
    checksum = "sha256:" + hashlib.sha256(source.encode()).hexdigest()
    return _policy(translate(source), None, checksum, f"coder/baselines/{name}.py")


#: A spec's prefix -> how to load the rest ("scripted:NAME", "coder:NAME"); anything else is a checkpoint.
PREFIXES: dict[str, Callable[[str, bool], Policy]] = {"scripted": _scripted, "coder": _baseline}


def _unknown(spec: str) -> UnknownPolicy:
    from jaxarena.coder.language import BASELINES
    from jaxarena.policies import SCRIPTED

    shipped = {c.name: c.kind for c in cards()}
    if shipped.get(spec, "squad") != "squad":
        return UnknownPolicy(f"{spec!r} is a shipped {shipped[spec]}, not a squad; zoo.load takes squads")
    squads = ", ".join(sorted(n for n, k in shipped.items() if k == "squad"))
    return UnknownPolicy(
        f"no squad policy {spec!r}: not a run directory with a config.json, nor a shipped squad ({squads}); "
        f"or pass scripted:NAME ({', '.join(sorted(SCRIPTED))}) or coder:NAME ({', '.join(sorted(BASELINES))})"
    )


def load(spec: str, greedy: bool = False) -> Policy:
    """The squad `spec` names: a shipped name ("A", "B-obey-raid", archived ones too), a run or
    exported directory, "scripted:NAME" or "coder:NAME". `greedy` takes a network's argmax action
    (scripted squads and baselines ignore it). UnknownPolicy (a ValueError) lists the choices."""
    prefix, colon, rest = str(spec).partition(":")
    if colon and prefix in PREFIXES:
        return PREFIXES[prefix](rest, greedy)
    from jaxarena.algorithms.checkpoint import load_policy, resolve_path, source_name

    try:
        directory = resolve_path(spec)
    except FileNotFoundError:
        raise _unknown(str(spec)) from None
    fn, params = load_policy(directory, greedy=greedy)
    card = read_card(directory) if (directory / CARD_FILE).is_file() else None
    return _policy(fn, params, "sha256:" + directory_checksum(directory), source_name(directory), card)


def list(kind: str | None = None, status: str | None = None) -> builtins.list[Card]:  # noqa: A001
    """The shipped entries' cards, filtered by `kind` (`KINDS`) and `status` (`STATUSES`)."""
    return cards(kind, status)


def table(kind: str | None = None, status: str | None = None, ci: bool = False) -> str:
    """The entries as a markdown table (`ci` adds each win rate's 95% interval)."""
    return _table(kind, status, ci)
