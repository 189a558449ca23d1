"""Named scenario presets: `jaxarena.make("Arena-v0", scenario="headroom")`.

A scenario is a set of `EnvParams` overrides, plus the few rules beyond the
paper that a preset needs, each switched by an `EnvParams` field that is a
traced value (so one compiled program serves several scenarios). `paper`, the
default, is the paper's arena unchanged. Explicit overrides given to `make`
win over a scenario's. docs/arena.md ("Scenarios") gives each preset's
rationale.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .names import BOT_MAX_HP

#: name -> EnvParams overrides. Squad size stays the paper's, and the NPCs' stats but in `unity`.
SCENARIOS = MappingProxyType(
    {
        # Table 1 as published.
        "paper": MappingProxyType({}),
        # The scripted-squad probe's setting where the best tactic depends on
        # the balanced bot's mode (melee a charging bot, kite a fleeing one):
        # as fast as the NPCs, so kiting can keep range, and 5x the HP, so a
        # rush no longer wins by damage alone.
        "headroom": MappingProxyType({"bot_speed": 4.0, "bot_hp": 5.0 * BOT_MAX_HP}),
        # As `headroom`, with a balanced bot that switches mode about twice as
        # often, so a tactic chosen once per 5 s decision goes stale sooner.
        "headroom_fast_switch": MappingProxyType(
            {
                "bot_speed": 4.0,
                "bot_hp": 5.0 * BOT_MAX_HP,
                "balanced_phase_min_s": 3.0,
                "balanced_phase_max_s": 9.0,
            }
        ),
        # A bot that can take and deal a beating: 2.5x the HP and twice the melee
        # damage. A melee trade is no longer a sure win, so standing off, ranged
        # fire and where the squad stands start to matter. A trained here wins
        # 36% / 98% / 20% (aggressive / evasive / balanced): inside the calibration
        # band (20-80%) for two bots, not the evasive one (docs/arena.md).
        "brute": MappingProxyType({"bot_hp": 2.5 * BOT_MAX_HP, "bot_melee_damage": 30.0}),
        # `brute` against the clock (a raid's enrage timer): a 48 s episode and
        # HP x2.3. A-raid's wins against the evasive bot come at a median 43 s, so the clock
        # makes that chase a gamble, while the aggressive and balanced fights
        # are decided in about 10 s. A fine-tuned here wins 55% / 73% / 25%
        # (seed 1, shipped as A-raid; seed 0: 49 / 61 / 23): inside the calibration
        # band (20-80%) against every bot (docs/arena.md).
        "raid": MappingProxyType({"bot_hp": 2.3 * BOT_MAX_HP, "bot_melee_damage": 30.0, "episode_s": 48.0}),
        # The closest fit to the paper's Combination A row (Table 6) with A's default recipe (12M env
        # steps): the squad's melee is weak (0.5) and its orbs lead (2.5), so it wears a fleeing bot
        # down from range in about 78 s; the bot's melee (8) is about half Table 1's, and wins almost
        # every brawl, in about 35 s, not the paper's 78. docs/results.md gives the fit, the held-out
        # figures and what it misses.
        "unity": MappingProxyType({"npc_melee_damage": 0.5, "orb_damage": 2.5, "bot_melee_damage": 8.0}),
        # The paper's stats with a bot whose melee hits every NPC in range:
        # clumping in melee is punished, so spreading out (Surround) matters.
        "cleave": MappingProxyType({"bot_cleave": 1.0}),
    }
)
DEFAULT_SCENARIO = "paper"


@dataclass(frozen=True)
class TrainingStandard:
    """What a scenario calls a trained squad, and a training run that has stopped learning.

    `bars`: the held-out NPC win rate a squad's final policy must reach against each bot to count
    as learned (None: the scenario declares none, and training summaries judge nothing).
    The collapse checks read the training metrics as they come: once past `after_steps` env steps,
    a run is *collapsing* when, over the last `window_steps`, it won no training episode
    (`no_wins`), or its policy entropy stayed under `entropy_floor` nats while it won under
    `stuck_win_rate` of its training episodes (`entropy_collapse`: it has settled on a way of
    playing that does not win). Either is a warning, printed when it starts and when it clears.
    """

    bars: MappingProxyType | None
    after_steps: int = 4_000_000
    window_steps: int = 2_000_000
    entropy_floor: float = 0.5
    stuck_win_rate: float = 0.05


#: name -> its training standard. `paper`'s bars are the time-to-policy bars (docs/training.md);
#: `raid`'s are the shipped A-raid's lower 95% bounds, rounded down (a squad as good as A-raid).
#: The collapse checks are the same for every scenario unless one declares its own.
TRAINING_STANDARDS = MappingProxyType(
    {
        "paper": TrainingStandard(MappingProxyType({"aggressive": 0.95, "evasive": 0.90, "balanced": 0.95})),
        "raid": TrainingStandard(MappingProxyType({"aggressive": 0.50, "evasive": 0.65, "balanced": 0.20})),
    }
)


def training_standard(name: str) -> TrainingStandard:
    """Scenario `name`'s training standard: its own, or no bars and the default collapse checks."""
    scenario_overrides(name)  # an unknown name: the ValueError listing the presets
    return TRAINING_STANDARDS.get(name, TrainingStandard(bars=None))


def scenario_overrides(name: str) -> dict:
    """The `EnvParams` overrides of scenario `name`; ValueError listing the presets if unknown."""
    if not isinstance(name, str) or name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; presets: {', '.join(SCENARIOS)}")
    return dict(SCENARIOS[name])
