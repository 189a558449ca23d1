"""What a protocol run is: `ProtocolConfig`, its cells, their names and their keys.

A *cell* is one label of a combination against one bot type. The
combinations are values, one module each under `protocol.combinations`
(whose registry this module checks names against; each module's docstring
says what it plays); a combination may play several labels per bot (C its
ablations, "C-N1", ...). What only one combination reads is its own options
(`Combination.options`); the configuration holds them by combination name.

Bots are named as in `jaxarena.names.BOT_TYPES`; a cell's key is
`fold_in(PRNGKey(seed), bot_index(bot))`, the same for every combination (the
paired design) and the same whichever other bots are run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxarena.config_files import load_config
from jaxarena.llm.backends import parse_llm_spec
from jaxarena.llm.choice import DECODE_MODES
from jaxarena.llm.paths import LLM_PATHS
from jaxarena.names import BOT_TYPES, DECISION_PERIOD_S, EPISODE_S, bot_index
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

#: What a run plays unless told otherwise: the paper's two (F and O cost minutes more, W seconds).
DEFAULT_COMBINATIONS: tuple[str, ...] = ("A", "B")
#: Playouts per tag of the oracle (Combination O and decision pricing) unless told otherwise.
DEFAULT_ORACLE_ROLLOUTS = 8
#: Version of the stored cell layout (`cells/<comb>_<bot>.json`); part of every cell's fingerprint.
# 2: A cells log the team reward alone; 3: B, F and O cells log their policy's own shaping.
CELL_FORMAT = 3


@dataclasses.dataclass(frozen=True)
class ProtocolConfig:
    """Everything that defines a protocol run (the paper's defaults).

    The run's own settings and those several combinations share are fields;
    what one combination alone reads is in `options`.

    episodes, seed, bots, combinations: the cells (label x bot) and their paired keys.
    policy_b: B's squad, which F, G, L, O and R play too: a checkpoint directory, a
      shipped policy's name ("B"; "B-paper" is the paper recipe's B on Table 3's
      observation), "scripted:NAME" for a reference squad of `jaxarena.policies.SCRIPTED`
      ("scripted:focus_fire", ...), or "coder:NAME" for a white-box baseline
      ("coder:kite"; docs/coder.md). A's squad is A's option.
    greedy: take the policies' most likely action instead of sampling it.
    llm: "embedded" (in-process SmolLM2-135M, the default), "ollama", or
      "gguf:PATH" (a local GGUF run in-process; PATH may be ollama:NAME[:TAG]).
      B's LLM; L plays the same model with its own adapter.
    model: the Ollama model (e.g. "mistral"); ignored by the embedded backend.
    host: the Ollama server (default $OLLAMA_HOST or localhost:11434).
    decode: "choice" (the reply is one tag digit, with the model's probabilities
      where the backend has them) or "free" (Table 10's 3-token generation);
      None = the backend's default: choice for the embedded model, free (the
      paper's mode) for Ollama.
    adapter: a LoRA adapter for B's LLM (a shipped name or a directory).
    llm_path: "auto", "host" or "graph" (see `LLM_PATHS`); the graph path runs
      only the embedded model's choice decoding and reads no prompt cache (it fills it).
    num_periods: decision periods per episode; None = a full episode (120 s,
      or the scenario's `episode_s`; only tests shorten it).
    n_boot: bootstrap resamples of every confidence interval.
    scenario: a preset of `jaxarena.scenarios.SCENARIOS`, the arena of every cell.
    oracle_rollouts: K, the oracle's playouts per tag (Combination O and the pricing of
      B's and C's decisions).
    options: combination name -> its options (`Combination.options`, e.g.
      `{"C": COptions(ablations=())}`; a dict of fields is accepted too). A played
      combination left out gets its defaults; options of one not played are kept
      for those that read them (W plays A's tag) and checked by their combination.
    """

    episodes: int = 100
    seed: int = 0
    bots: tuple[str, ...] = BOT_TYPES
    combinations: tuple[str, ...] = DEFAULT_COMBINATIONS
    policy_b: str = "B"
    greedy: bool = False
    llm: str = "embedded"
    model: str | None = None
    host: str | None = None
    decode: str | None = None
    num_periods: int | None = None
    n_boot: int = 10_000
    llm_path: str = "auto"
    scenario: str = DEFAULT_SCENARIO
    oracle_rollouts: int = DEFAULT_ORACLE_ROLLOUTS
    adapter: str | None = None
    # Left out of the hash (a dict is not hashable); equality still compares it.
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def episode_s(self) -> float:
        """The longest episode in s: the paper's 120, or the scenario's own (`raid`: 48), or shorter
        where `num_periods` cuts the episodes."""
        preset = scenario_overrides(self.scenario)
        full = float(preset.get("episode_s", EPISODE_S))
        if self.num_periods is None:
            return full
        return min(full, self.num_periods * float(preset.get("decision_period_s", DECISION_PERIOD_S)))

    def __post_init__(self):
        for b in self.bots:
            # Exact names only: they become cell names and file names.
            if b not in BOT_TYPES:
                raise ValueError(f"unknown bot {b!r}; choose from {BOT_TYPES}")
        from .combinations import get, registry

        for c in self.combinations:
            get(c)  # raises ValueError naming the combinations
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        parse_llm_spec(self.llm)  # raises ValueError naming the accepted forms
        if self.decode is not None and self.decode not in DECODE_MODES:
            raise ValueError(f"unknown decode mode {self.decode!r}; choose from {', '.join(DECODE_MODES)}")
        if self.llm_path not in LLM_PATHS:
            raise ValueError(f"unknown LLM path {self.llm_path!r}; choose from {', '.join(LLM_PATHS)}")
        if len(set(self.combinations)) != len(self.combinations):
            raise ValueError(f"combinations repeat: {self.combinations}")
        scenario_overrides(self.scenario)  # raises ValueError naming the presets
        if self.oracle_rollouts < 1:
            raise ValueError(f"oracle_rollouts must be >= 1, got {self.oracle_rollouts}")
        object.__setattr__(self, "options", _complete_options(self.options, self.combinations))
        for combination in registry().values():  # each checks its own options, played or not
            combination.check(self)

    def options_of(self, name: str) -> Any:
        """Combination `name`'s options: those given, else its defaults (None where it has none)."""
        from .combinations import get

        if name in self.options:
            return self.options[name]
        options = get(name).options
        return None if options is None else options()

    def labels(self) -> list[str]:
        """The run's cell labels in order: the combinations as given, each followed by its variants
        (C by its ablations)."""
        from .combinations import get

        return [label for c in self.combinations for label in get(c).labels_in(self)]

    def cells(self) -> list[tuple[str, str]]:
        """(label, bot) in run order: combination by combination, as given (A, B by default); C's
        ablations follow C, each a cell of its own."""
        return [(c, b) for c in self.labels() for b in self.bots]

    def as_dict(self) -> dict:
        """The run's settings as plain data (`config.json`, summary.json's `config`); `from_file` reads it back."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["bots"], d["combinations"] = list(self.bots), list(self.combinations)
        d["options"] = {name: dataclasses.asdict(options) for name, options in self.options.items()}
        return d

    @classmethod
    def from_file(cls, path) -> ProtocolConfig:
        """The config in a .json or .toml file: a run's `config.json`, or one written by hand."""
        return load_config(cls, path)

    def identity_dict(self) -> dict:
        """What the default run id hashes: the run's settings and what each combination adds.

        The oracle's, the scenario's and the adapter's fields count only away from their
        defaults, and each combination adds its options as it says (`Combination.identity_in`:
        the older ones under the flat names they had before options were grouped), so a
        configuration keeps the run id it had before a setting existed and re-running an old
        command finds its run (cells of an older `CELL_FORMAT` are then refused, with a message
        naming the format).
        """
        d = self.as_dict()
        del d["options"]
        for name, default in (
            ("scenario", DEFAULT_SCENARIO),
            ("oracle_rollouts", DEFAULT_ORACLE_ROLLOUTS),
            ("adapter", None),
        ):
            if d[name] == default:
                del d[name]
        from .combinations import registry

        for combination in registry().values():
            d.update(combination.identity_in(self))
        return d


def _complete_options(given: Mapping[str, Any], played: tuple[str, ...]) -> dict[str, Any]:
    """`options` checked and completed, in name order: each entry of its combination's class (a dict of
    fields is read into it), and every played combination that has options present."""
    from .combinations import get, registry

    out = {}
    for name, combination in registry().items():
        if name not in given and (name not in played or combination.options is None):
            continue
        options = given.get(name)
        if combination.options is None:
            raise ValueError(f"Combination {name} has no options (given {options!r})")
        if options is None:
            options = combination.options()
        elif isinstance(options, Mapping):
            options = combination.options(**options)
        if not isinstance(options, combination.options):
            raise ValueError(f"Combination {name}'s options are a {combination.options.__name__}, not {options!r}")
        out[name] = options
    for name in given:
        get(name)  # a name that is no combination: a ValueError naming them
    return out


def cell_name(combination: str, bot: str) -> str:
    """ "A_balanced": the cell's name in `cells/`, `summary.json` and the timings."""
    return f"{combination}_{bot}"


def cell_key_data(seed: int, bot: str) -> np.ndarray:
    """Raw uint32 key of a cell, fold_in(PRNGKey(seed), bot_index(bot)); identical for every combination."""
    import jax

    return np.asarray(jax.random.fold_in(jax.random.PRNGKey(seed), bot_index(bot)))


def episode_sets(cell: dict) -> list[tuple[str, dict]]:
    """A stored cell's episodes as (label, episodes): ("A", ...) for most cells; F's one set per
    held tag, labelled "F0".."F3"; W's one set per squad, labelled "W:rush", ... (the label
    `episodes.csv` and `summary.json` use). Its combination says how (`Combination.episode_sets`)."""
    from .combinations import of_label

    return of_label(cell["combination"]).episode_sets(cell)
