"""What a combination is: a value that says what plays, how its cells are played, logged and reported.

A `Combination` names its squads (the policies that play), plays one cell
(one bot, a batch of seeded episodes) with its tag source, adds what its
results depend on to the cell's fingerprint, says how its stored cell splits
into episode sets (`episodes.csv` rows, `summary.json` labels) and which
report sections it brings. `protocol.combinations` holds one module per
combination and the registry that maps names to them; the runner, the
configuration, the summary and the report read the registry and know no
combination by name.

Variants: a combination may play several labels, each a cell of its own per
bot, named `<name>-<variant>` (C's ablations "C-N1", ...); `labels(config)`
lists them in run order.

Options: what only a combination reads (A's fixed tag, C's selectors, L's
adapter) is a frozen dataclass of its own (`Options`), which adds its flags to
the command line and builds itself from the parsed arguments; the run's
`ProtocolConfig` holds one per combination (`config.options_of(name)`), so a
new option is an edit of one module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

#: progress(episodes done in the cell, **status shown beside the bar)
Progress = Callable[..., None]


@dataclasses.dataclass(frozen=True)
class Played:
    """What playing one cell gave.

    episodes: the cell's episode sets as stored, e.g. {"episodes": {...}}, or
      {"episodes_by_tag": [...]} for one set per held tag.
    compile_s, wall_s: compile time (0 where the program was reused) and the
      time the episodes took.
    decisions: one record per decision made (the `decisions.jsonl` rows).
    llm: the cell's LLM counters, or None.
    timing: more timing entries, or overrides of `llm_s` and `simulation_s`
      (the simulation's time is `wall_s` unless told otherwise).
    """

    episodes: dict
    compile_s: float
    wall_s: float
    decisions: list = dataclasses.field(default_factory=list)
    llm: dict | None = None
    timing: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Results:
    """What a report section reads: `by` (label -> bot -> cell), the descriptive rows by episode-set
    label and bot, the run's config and its metadata (policies, LLM, the combinations' identities)."""

    by: dict
    descriptive: dict
    config: Any
    meta: dict


def win_entry(row: dict) -> dict:
    """A descriptive row's squad win % with its 95% CI and n (the sections' "win" entries)."""
    return {"win_pct": row["npc_win_pct"], "ci95": list(row["ci95"]["npc_win"]), "n": row["n"]}


@dataclasses.dataclass(frozen=True)
class ReportSection:
    """One part of a run's outputs: an entry of summary.json, its report.md text, figures and console lines.

    key: the summary.json entry it writes.
    rank: where it goes in summary.json, report.md and the console (ascending).
    applies: whether a run's config has anything for it.
    summarize: `Results -> dict`, the entry (nothing but numbers and labels).
    render: entry -> report.md lines; figures: `(entry, save, plt)`, drawing each figure and
      handing it to `save(fig, file name)`; console: entry -> None, printing a few lines.
    """

    key: str
    rank: int
    applies: Callable[[Any], bool]
    summarize: Callable[[Results], dict]
    render: Callable[[dict], list[str]] | None = None
    figures: Callable[[dict, Callable, Any], None] | None = None
    console: Callable[[dict], None] | None = None


class Options(Protocol):
    """What a combination's options class is: a frozen dataclass whose defaults are the paper's (or the
    shipped artifacts'), with the flags that set it."""

    @classmethod
    def add_arguments(cls, group) -> None:
        """Adds the options' flags to `group` (an argparse argument group), each with its help."""

    @classmethod
    def from_args(cls, args) -> Options:
        """The options the parsed arguments ask for; a ValueError names what is wrong."""


def _single_set(cell: dict) -> list[tuple[str, dict]]:
    return [(cell["combination"], cell["episodes"])]


def _nothing(*args) -> dict:
    return {}


@dataclasses.dataclass(frozen=True)
class Combination:
    """One combination of the protocol (see the module docstring).

    name: "A", ...; a variant's label is "<name>-<variant>".
    about: one line for the command line's help.
    squads: `(context, label) -> {episode-set label: policy spec}`, what plays.
    play: `(context, label, bot, key, progress) -> Played`, one cell on the cell's key.
    fingerprint: `(context, label) -> dict`, what the cell's results depend on beyond the policies'
      checksums and the run's episodes, seed, greediness, periods and scenario.
    labels: `config -> [label, ...]`, the cells it plays per bot (default: its name alone).
    episode_sets: `cell -> [(label, episodes), ...]`, a stored cell's episode sets.
    check: `config -> None`, raises ValueError for options of this combination that cannot work.
    meta: `(context, config) -> dict`, identities for summary.json (e.g. the LLM's), where it plays.
    preflight: `context -> None`, run once before the first of its cells is computed: raises, with the
      fix in the message, where something its cells need cannot work (an LLM server that is down).
    options: its `Options` class, or None where it has none.
    identity: `config -> dict`, what its options add to the hash of the run's default id (see
      `identity_in`); None: its options under its name, where it plays.
    sections: the report sections it brings; a section applies by the config (the oracle's also
      to a run that only prices B's decisions), and one shared by several combinations is one value.
    """

    name: str
    about: str
    squads: Callable[[Any, str], dict[str, str]]
    play: Callable[[Any, str, str, Any, Progress], Played]
    fingerprint: Callable[[Any, str], dict] = _nothing
    labels: Callable[[Any], list[str]] | None = None
    episode_sets: Callable[[dict], list[tuple[str, dict]]] = _single_set
    check: Callable[[Any], None] = lambda config: None
    meta: Callable[[Any, Any], dict] = _nothing
    preflight: Callable[[Any], None] = lambda context: None
    options: type | None = None
    identity: Callable[[Any], dict] | None = None
    sections: tuple[ReportSection, ...] = ()

    def labels_in(self, config) -> list[str]:
        """The labels this combination plays in a run, in order."""
        return list(self.labels(config)) if self.labels is not None else [self.name]

    def identity_in(self, config) -> dict:
        """The entries this combination adds to what the run's default id hashes. Options of a
        combination that does not play change nothing, so they stay out: a run keeps its id (and
        finds its stored cells) whatever combinations are added beside it."""
        if self.identity is not None:
            return self.identity(config)
        if self.options is None or self.name not in config.combinations:
            return {}
        return {self.name: dataclasses.asdict(config.options_of(self.name))}
