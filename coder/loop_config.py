"""A coder run's settings (`LoopConfig`), its error type and its default folder name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from jaxarena.cli_errors import UserError
from jaxarena.names import BOT_TYPES, bot_index
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

from .score_types import ScoreConfig

#: The Ollama model the docs' reproduction command uses (a code model, as SMAC-R1's coder).
DEFAULT_OLLAMA_MODEL = "qwen2.5-coder:7b"
#: Every coder reply is drawn with this top-p: the loop's, the evaluation's and GRPO's groups (whose loss takes
#: its log-probs under the same rule, `coder.tuning.model.sampled_log_probs`).
CODER_TOP_P = 0.95
#: Config fields that may change when a run resumes (they do not change what was recorded).
RESUMABLE = ("rounds", "host", "timeout_s")


class LoopError(UserError):
    """A run that cannot start or go on (bad config, backend failure); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """One run of the loop. `llm` is a backend spec: "embedded", "ollama" or "gguf:PATH"."""

    llm: str = "embedded"
    model: str | None = None
    host: str | None = None
    k: int = 4
    rounds: int = 3
    seed: int = 0
    episodes_per_bot: int = 1000
    scenario: str = DEFAULT_SCENARIO
    bots: tuple[str, ...] = BOT_TYPES
    lanes: int = 2048
    max_tokens: int = 768
    temperature: float = 0.7
    timeout_s: float = 600.0
    gif_bot: str = "balanced"
    race: bool = False
    race_alpha: float = 0.05
    race_first: int = 30
    coder_adapter: str | None = None  # a LoRA adapter for the coder's replies only (embedded and gguf backends)

    def __post_init__(self):
        from jaxarena.llm.backends import parse_llm_spec

        try:
            name, _ = parse_llm_spec(self.llm)
        except ValueError as exc:
            raise LoopError(str(exc)) from None
        if self.model is not None and name != "ollama":
            raise LoopError(f"--model names an Ollama model; the {name!r} backend takes none")
        for field in ("k", "rounds", "episodes_per_bot", "lanes", "max_tokens"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LoopError(f"{field} must be a positive integer, got {value!r}")
        if not 0.0 <= self.temperature <= 2.0:
            raise LoopError(f"temperature must be in [0, 2], got {self.temperature!r}")
        if self.race:
            try:
                self.race_config()
            except ValueError as exc:
                raise LoopError(f"race: {exc}") from None
        if self.coder_adapter is not None and name == "ollama":
            raise LoopError("--coder-adapter runs in our own forward pass: use --llm embedded or gguf:PATH")
        if self.timeout_s <= 0:
            raise LoopError(f"timeout_s must be positive, got {self.timeout_s!r}")
        try:
            scenario_overrides(self.scenario)
            for bot in (*self.bots, self.gif_bot):
                bot_index(bot)
            self.score_config()
        except ValueError as exc:
            raise LoopError(str(exc)) from None

    @property
    def backend_name(self) -> str:
        from jaxarena.llm.backends import parse_llm_spec

        return parse_llm_spec(self.llm)[0]

    def score_config(self) -> ScoreConfig:
        return ScoreConfig(
            episodes_per_bot=self.episodes_per_bot,
            scenario=self.scenario,
            seed=self.seed,
            bots=tuple(self.bots),
            lanes=self.lanes,
        )

    def race_config(self):
        """The race's settings (`racing.RaceConfig`), or None when candidates get the full budget."""
        from .racing import RaceConfig

        return RaceConfig(first=self.race_first, alpha=self.race_alpha) if self.race else None

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["bots"] = list(self.bots)
        if not self.race:  # so a run recorded before racing existed resumes with the same config
            for field in ("race", "race_alpha", "race_first"):
                del data[field]
        if self.coder_adapter is None:  # likewise for runs recorded before coder adapters
            del data["coder_adapter"]
        return data

    @classmethod
    def from_json(cls, data: dict) -> LoopConfig:
        return cls(**{**data, "bots": tuple(data["bots"])})


def run_name(config: LoopConfig) -> str:
    """The default run folder name: the settings that make a run, so rerunning a command resumes it."""
    model = config.model or (DEFAULT_OLLAMA_MODEL if config.backend_name == "ollama" else "")
    llm = config.llm if config.backend_name != "gguf" else "gguf-" + Path(config.llm.partition(":")[2]).stem
    raw = f"{llm}-{model}-k{config.k}-s{config.seed}-{config.scenario}"
    if config.coder_adapter:
        # The adapter's checksum, not its folder's name: runs/a/adapter and runs/b/adapter are other adapters.
        # Resolving it here also refuses a missing adapter before any work.
        from jaxarena.llm.adapters import adapter_checksum_of, resolve_adapter

        raw += "-coder-" + adapter_checksum_of(resolve_adapter(config.coder_adapter, kind="coder-adapter"))[:12]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-").replace("--", "-")
