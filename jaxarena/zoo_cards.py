"""The zoo's cards: what every shipped squad, selector and adapter is, how it was made and what it scored.

Each shipped directory holds a `card.json` beside its weights. Squads and selectors share one
layout (`FIELDS`); the LLM adapter's card keeps the layout of `jaxarena.llm.tuning` and is read
into the same `Card`. A card is not part of a policy's checksum (`jaxarena.zoo.directory_checksum`
leaves it out), so writing or correcting one never invalidates a stored protocol cell.

    from jaxarena import zoo
    zoo.list(kind="squad", status="recommended")     # [Card(name="A", ...), ...]
    print(zoo.table(status="recommended"))           # markdown
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CARD_FILE = "card.json"
KINDS = ("squad", "selector", "adapter")
#: recommended: what the protocol plays by default, and the squads the docs build on;
#: ablation: a variant that isolates one choice of a recommended entry;
#: history: a stage on the way to a recommended entry, or one it replaced.
STATUSES = ("recommended", "ablation", "history")
BOTS = ("aggressive", "evasive", "balanced")
NOT_MEASURED = "not measured"
#: Every field of a squad's or selector's card.json.
FIELDS = (
    "format",
    "name",
    "kind",
    "status",
    "summary",
    "env_id",
    "scenario",
    "plays",
    "recipe",
    "init_from",
    "steps",
    "command",
    "win_rates",
    "note",
)


class CardError(ValueError):
    """A card.json that is missing, unreadable or incomplete."""


@dataclass(frozen=True)
class WinRate:
    """The squad's win rate against one bot: percent, its 95% interval, episodes, the episodes' seed.

    `tag` is the tag held for the whole episode (None for a squad without tags; "selected" where a
    selector or an LLM chose it, every 5 s or, for the glance LLM, every 0.2 s)."""

    bot: str
    win_pct: float
    ci95: tuple[float, float]
    n: int
    seed: int | None
    tag: str | None


@dataclass(frozen=True)
class Card:
    """One zoo entry. `win_rates` is empty where none was measured; `steps` counts env steps
    (None for an adapter, which was tuned on recorded decisions); `plays` names the squad a
    selector or adapter chooses tags for."""

    name: str
    kind: str
    status: str
    summary: str
    env_id: str | None
    scenario: str
    plays: str | None
    recipe: str
    init_from: str | None
    steps: int | None
    command: str
    win_rates: tuple[WinRate, ...]
    measured_by: str
    note: str
    directory: Path
    #: Where the rates were measured, {"jax": version, "device": "cpu" or "gpu", "cores": n}: there they replay
    #: exactly (the same win counts); None where the card does not say.
    platform: dict | None = None

    @property
    def measured(self) -> bool:
        return bool(self.win_rates)

    def rate(self, bot: str) -> WinRate | None:
        return next((r for r in self.win_rates if r.bot == bot), None)


def _bot_order(rate: WinRate) -> int:
    return BOTS.index(rate.bot) if rate.bot in BOTS else len(BOTS)


def _rates(raw, name: str) -> tuple[tuple[WinRate, ...], str]:
    if raw == NOT_MEASURED:
        return (), NOT_MEASURED
    try:
        seed, by_bot = raw["seed"], raw["by_bot"]
        rates = [
            WinRate(bot, float(r["win_pct"]), (float(r["ci95"][0]), float(r["ci95"][1])), int(r["n"]), seed, r["tag"])
            for bot, r in by_bot.items()
        ]
        return tuple(sorted(rates, key=_bot_order)), str(raw["measured_by"])
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise CardError(f"{name}: win_rates is neither {NOT_MEASURED!r} nor by_bot records ({exc!r})") from None


def _zoo_card(raw: dict, directory: Path) -> Card:
    """A squad's or selector's card (`FIELDS`)."""
    missing = [f for f in FIELDS if f not in raw]
    if missing:
        raise CardError(f"{directory / CARD_FILE}: missing {', '.join(missing)}")
    if raw["status"] not in STATUSES:
        raise CardError(f"{directory / CARD_FILE}: status {raw['status']!r} is not one of {', '.join(STATUSES)}")
    rates, measured_by = _rates(raw["win_rates"], raw["name"])
    fields = {f: raw[f] for f in FIELDS if f not in ("format", "win_rates")}
    platform = raw["win_rates"].get("platform") if isinstance(raw["win_rates"], dict) else None
    return Card(**fields, win_rates=rates, measured_by=measured_by, directory=directory, platform=platform)


def _known_status(card: Card, directory: Path) -> Card:
    """`card`, if its status is one of `STATUSES`; else CardError."""
    if card.status not in STATUSES:
        raise CardError(f"{directory / CARD_FILE}: status {card.status!r} is not one of {', '.join(STATUSES)}")
    return card


def _adapter_card(raw: dict, directory: Path) -> Card:
    """An LLM adapter's card (`jaxarena.llm.tuning`'s layout) as a zoo `Card`; CardError if incomplete."""
    try:
        card = _adapter_fields(raw, directory)
    except (KeyError, TypeError, ValueError) as exc:
        raise CardError(f"{directory / CARD_FILE}: an incomplete adapter card ({type(exc).__name__}: {exc})") from None
    return _known_status(card, directory)


def _selected_rates(played: dict, who: str) -> tuple[WinRate, ...]:
    """An adapter card's win rates per bot, in bot order, from `played`'s `{who}_win_pct` and `{who}_ci95`."""
    n, seed = int(played["episodes_per_bot"]), played["seed"]
    rates = (
        WinRate(bot, float(r[f"{who}_win_pct"]), tuple(r[f"{who}_ci95"]), n, seed, "selected")
        for bot, r in played["by_bot"].items()
    )
    return tuple(sorted(rates, key=_bot_order))


def _adapter_fields(raw: dict, directory: Path) -> Card:
    played = raw["played"]
    rates = _selected_rates(played, "L")
    teacher = raw.get("train_config", {}).get("teacher")
    return Card(
        name=raw["name"],
        kind="adapter",
        status=raw["status"],
        summary=f"SmolLM2-135M's tag choice, LoRA-tuned ({raw['method']}) for {played['squad']} "
        f"on {played['scenario']}",
        env_id=None,
        scenario=played["scenario"],
        plays=played["squad"],
        recipe=f"{raw['method']}" + (f", teacher {teacher}" if teacher else ""),
        init_from=raw.get("train_config", {}).get("init_from") or f"SmolLM2-135M (sha256 {raw['base_sha256'][:12]}…)",
        steps=None,
        command="\n".join(raw["commands"]),
        win_rates=rates,
        measured_by=f"jaxarena-tune-llm evaluate, {played['episodes_per_bot']} episodes per bot, seed {played['seed']}"
        + (f" ({played['keys']})" if played.get("keys") else ""),
        note=raw["about"]
        + (
            f"; {raw['steps']} optimiser steps on recorded decisions, no env steps"
            if raw["method"] != "grpo"
            else f"; {raw['steps']} GRPO steps on states of its own play"
        )
        # Where its training shared episodes with the protocol's keys, the card says so.
        + (f". {raw['data_overlap']}" if raw.get("data_overlap") else ""),
        directory=directory,
        platform=played.get("platform"),
    )


def _coder_adapter_card(raw: dict, directory: Path) -> Card:
    """The coder's adapter (`jaxarena.coder.tuning`): it writes programs, so its measure is theirs, not a squad's."""
    try:
        ev = raw["evaluation"]
        stock, tuned = ev["stock"], ev["tuned"]
        card = Card(
            name=raw["name"],
            kind="adapter",
            status=raw["status"],
            summary=f"SmolLM2-135M as the coder, LoRA-tuned ({raw['method']}) to write squad policies",
            env_id=None,
            scenario=raw["config"]["scenario"],
            plays=None,
            recipe=raw["method"],
            init_from=raw["config"].get("init_from") or f"SmolLM2-135M (sha256 {raw['base_sha256'][:12]}…)",
            steps=None,
            command="\n".join(raw["commands"]),
            win_rates=(),
            measured_by=f"jaxarena-tune-coder evaluate, {stock['replies']} replies to held-out plans",
            note=f"{raw['about']}; replies that ran {100 * stock['compiled']:.0f}% -> {100 * tuned['compiled']:.0f}%, "
            f"mean reward {stock['mean_reward']:+.2f} -> {tuned['mean_reward']:+.2f}",
            directory=directory,
        )
    except (KeyError, TypeError, ValueError) as exc:
        what = f"an incomplete coder adapter card ({type(exc).__name__}: {exc})"
        raise CardError(f"{directory / CARD_FILE}: {what}") from None
    return _known_status(card, directory)


def _transfer_note(transfer: dict | None) -> str:
    """ "; played on brute with B-obey-brute: +49 / -3 / +29 points over B (per bot)" from a transfer record."""
    if not transfer:
        return ""
    gains = " / ".join(f"{transfer['by_bot'][bot]['minus_B'][0]:+.0f}" for bot in BOTS if bot in transfer["by_bot"])
    return f"; played on {transfer['scenario']} with {transfer['squad']}: {gains} points over B (per bot)"


def _glance_adapter_card(raw: dict, directory: Path) -> Card:
    """The glance LLM's adapter (`jaxarena-tune-llm glance`): B's squad under its answers every 0.2 s."""
    try:
        played = raw["played"]
        card = Card(
            name=raw["name"],
            kind="adapter",
            status=raw["status"],
            summary=f"SmolLM2-135M's answers to the glance prompt every {raw['decision_period_s']} s, LoRA-tuned "
            f"on the game's reward for {played['squad']} on {played['scenario']}",
            env_id=None,
            scenario=played["scenario"],
            plays=played["squad"],
            recipe=raw["method"],
            init_from=f"SmolLM2-135M (sha256 {raw['base_sha256'][:12]}…)",
            steps=None,
            command="\n".join(raw["commands"]),
            win_rates=_selected_rates(played, "tuned"),
            measured_by="the held-out play of jaxarena-tune-llm glance or studies/glance_play.py, "
            f"{played['episodes_per_bot']} paired episodes per bot, seed {played['seed']}",
            note=f"{raw['about']}; {raw['steps']} steps of play" + _transfer_note(raw.get("transfer")),
            directory=directory,
            platform=played.get("platform"),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        what = f"an incomplete glance adapter card ({type(exc).__name__}: {exc})"
        raise CardError(f"{directory / CARD_FILE}: {what}") from None
    return _known_status(card, directory)


#: card.json's "kind" -> its reader (the tag model's adapter names itself "llm-adapter", the coder's "coder-adapter").
READERS = {
    "squad": _zoo_card,
    "selector": _zoo_card,
    "llm-adapter": _adapter_card,
    "coder-adapter": _coder_adapter_card,
    "glance-adapter": _glance_adapter_card,
}


def read_card(directory: str | Path) -> Card:
    """The `Card` in `directory/card.json`; CardError if there is none or it is incomplete."""
    directory = Path(directory)
    try:
        raw = json.loads((directory / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CardError(f"{directory}: no readable {CARD_FILE} ({type(exc).__name__}: {exc})") from None
    reader = READERS.get(raw.get("kind"))
    if reader is None:
        raise CardError(f"{directory / CARD_FILE}: kind {raw.get('kind')!r} is not one of {', '.join(READERS)}")
    return reader(raw, directory)


def shipped_directories() -> dict[str, dict[str, Path]]:
    """{kind: {name: directory}} of everything that ships, archived entries included."""
    from jaxarena.algorithms.checkpoint import shipped_policies
    from jaxarena.llm.adapters import ADAPTERS_DIR, shipped_adapters
    from jaxarena.selector.train import shipped_selectors

    adapters = {name: ADAPTERS_DIR / name for name in shipped_adapters()}
    return {"squad": shipped_policies(), "selector": shipped_selectors(), "adapter": adapters}


def cards(kind: str | None = None, status: str | None = None) -> list[Card]:
    """Every shipped entry's card, squads then selectors then adapters, by name; filtered by kind/status."""
    for value, allowed, what in ((kind, KINDS, "kind"), (status, STATUSES, "status")):
        if value is not None and value not in allowed:
            raise ValueError(f"unknown {what} {value!r}; choose from {', '.join(allowed)}")
    found = [read_card(d) for k, dirs in shipped_directories().items() if kind in (None, k) for d in dirs.values()]
    return sorted((c for c in found if status in (None, c.status)), key=lambda c: (KINDS.index(c.kind), c.name))


def _wins(card: Card, ci: bool) -> str:
    if not card.measured:
        return NOT_MEASURED
    tags = {r.tag for r in card.win_rates}
    # Whole points where the source gives whole points, else one decimal: no precision the card lacks.
    fmt = "{:.0f}" if all(float(r.win_pct).is_integer() for r in card.win_rates) else "{:.1f}"
    ci_fmt = "{:.0f}" if all(float(x).is_integer() for r in card.win_rates for x in r.ci95) else "{:.1f}"
    cells = []
    for bot in BOTS:
        r = card.rate(bot)
        if r is None:
            cells.append("–")
            continue
        interval = f" [{ci_fmt.format(r.ci95[0])}, {ci_fmt.format(r.ci95[1])}]" if ci else ""
        cells.append(fmt.format(r.win_pct) + interval + (f" ({r.tag})" if len(tags) > 1 and r.tag else ""))
    ns = sorted({r.n for r in card.win_rates})
    held = f", {next(iter(tags))}" if len(tags) == 1 and next(iter(tags)) else ""
    return " / ".join(cells) + f" (n {'/'.join(map(str, ns))}{held})"


def table(kind: str | None = None, status: str | None = None, ci: bool = False) -> str:
    """A markdown table of the entries; a column that a filter fixes is left out."""
    columns = ["name"] + ["kind"] * (kind is None) + ["status"] * (status is None)
    head = columns + ["arena (env / scenario)", "win % vs aggressive / evasive / balanced", "what it is"]
    rows = [" | ".join(head), " | ".join("---" for _ in head)]
    for c in cards(kind, status):
        arena = f"{c.env_id or '–'} / {c.scenario}" + (f", plays {c.plays}" if c.plays else "")
        values = [f"`{c.name}`"] + [c.kind] * (kind is None) + [c.status] * (status is None)
        rows.append(" | ".join([*values, arena, _wins(c, ci), c.summary]))
    return "\n".join(f"| {row} |" for row in rows)
