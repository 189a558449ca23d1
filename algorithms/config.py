"""The PPO configuration: one frozen, typed dataclass, serialisable to JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jaxarena.names import BOT_TYPES, NUM_NPCS, NUM_TAGS
from jaxarena.registry import ARENA_IDS
from jaxarena.scenarios import SCENARIOS

from .arena_knobs import arena_pairs

COMBINATIONS = ("A", "B")
#: The float hyper-parameters that change no array's shape: they are values carried by the runner
#: state (`RunnerState.hyper`), not constants of the program, so runs that differ only in them
#: (seeds aside) train in one vmapped program (`jaxarena.algorithms.multi_run`).
SWEEPABLE = (
    "lr",
    "ent_coef",
    "ent_coef_end",
    "clip_eps",
    "vf_coef",
    "max_grad_norm",
    "gamma",
    "gae_lambda",
    "approach_shaping",
    "approach_range",
)
#: B's shaping: Table 5's terms ("paper"), the engagement-gated intent terms ("intent",
#: `jaxarena.rewards.intent_shaping`) or the per-expert terms ("obey", `rewards.obey_shaping`);
#: the index is `EnvParams.shaping_recipe`.
RECIPES = ("paper", "intent", "obey")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyper-parameters of one PPO run (PureJaxRL names where they exist).

    Batch layout: `num_envs` arenas step in lock-step for `num_steps` ticks per
    update; each of the 5 NPCs is one sample of the shared policy, so an
    update sees `num_envs * num_steps * 5` agent transitions (fewer after
    masking dead NPCs).

    Bots: env slot i fights `bots[i % len(bots)]` for the whole run, so the
    bots get equal shares of the batch (`num_envs` should be a multiple of
    `len(bots)`). That is simpler than re-drawing per episode and gives the
    same data distribution in expectation.

    Combination "A": tag fixed at 0 and `shaping_weight` 0 (team reward
    only). "B": the tag is redrawn uniformly from 0..3 every
    `tag_period_ticks` ticks (5 s, incl. the first tick of each episode) and
    the Table 5 shaping is on with weight `shaping_weight` (default 1); it is
    set explicitly, since the arena's default reward is the team reward alone.
    `scenario` names the arena preset (`jaxarena.scenarios`); a config written
    before it existed loads as "paper".
    """

    combination: str = "A"
    # "ArenaFacing-v0" also shows the policy the bot's facing, which the
    # Surround and Flank shaping depend on (see docs/training.md).
    env_id: str = "Arena-v0"
    # A preset of jaxarena.scenarios: the rules and stats the arena is built with.
    scenario: str = "paper"
    # The shipped recipe: 4 of every 6 arenas fight the evasive bot, the only
    # one a naive squad can't beat; with equal shares the policy settled on
    # melee rushes and never learned to corner it. With the evasive bot alone
    # (the "fast_evasive" preset) more seeds learn it, and keep it.
    bots: tuple[str, ...] = ("aggressive", "evasive", "evasive", "evasive", "evasive", "balanced")
    num_envs: int = 192
    num_steps: int = 128
    total_timesteps: int = 25_000_000  # env steps (arena ticks), not agent steps
    update_epochs: int = 2
    num_minibatches: int = 4
    gamma: float = 0.995
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    # Annealed 0.02 -> 0: a constant 0.01 collapsed to rushing, a constant 0.02
    # learned the evasive bot and then drifted back towards uniform play.
    ent_coef: float = 0.02
    ent_coef_end: float | None = 0.0  # None: constant; else linear anneal ent_coef -> this over the run
    # None: the usual entropy bonus, ent_coef * H. A value H*: a two-sided pull, ent_coef * |H - H*|, that
    # pays for entropy below H* and charges for it above, so the entropy cannot drift up to uniform play
    # as under the bonus alone. A squad can still lose the evasive bot at constant entropy
    # (docs/benchmarks.md, "Time to policy").
    ent_target: float | None = None
    # False: a timeout (truncation) bootstraps from V(final_obs), as the time limit is not in the
    # observation. True: a timeout is terminal and worth 0, so letting the clock run out costs the
    # squad its bootstrapped value.
    timeout_is_terminal: bool = False
    # Weight w of a potential-based shaping term for each NPC, gamma * Phi(s') - Phi(s) with
    # Phi = -w * (distance to the bot / arena diagonal) and Phi = 0 where the NPC's episode ends:
    # it pays for closing in, and leaves the best policy unchanged (Ng, Harada and Russell,
    # "Policy invariance under reward transformations"). 0: the team reward alone.
    approach_shaping: float = 0.0
    # Where the approach shaping stops paying, in arena units: Phi = -w * max(distance - range, 0) /
    # diagonal, so closing in is paid only from afar. Within the range only the team reward speaks,
    # and a strong pull cannot turn into a rush into melee. 0: paid all the way in.
    approach_range: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    lr: float = 3e-4
    anneal_lr: bool = True
    # Env steps over which lr (to 0) and ent_coef (to ent_coef_end) anneal; None: the whole run.
    # A horizon past total_timesteps ends the run mid-anneal, as the first steps of a longer run
    # (docs/benchmarks.md, "Time to policy": the horizon decides when, and whether, a seed learns
    # the evasive bot).
    anneal_steps: int | None = None
    hidden: int = 64
    activation: str = "tanh"
    # GRU units each NPC carries from tick to tick (`RecurrentActorCritic`, the squad with memory); 0: none,
    # the feed-forward MLP. Its minibatches are whole sequences, so num_envs x 5 must divide into them.
    memory: int = 0
    # The network also gets a one-hot of the tag (see ActorCritic); None: on for
    # B, off for A. As one float in [0, 1] the tag could only shift behaviour
    # monotonically from tag 0 to tag 3, and B barely responded to it.
    tag_one_hot: bool | None = None
    # One actor-critic per tag (see ActorCritic.tag_experts); B only.
    tag_experts: bool = False
    # With tag_experts: these tags' experts keep their initial (e.g. warm-started) weights. A
    # frozen Aggressive expert started from A plays exactly A under that tag (docs/training.md).
    frozen_tags: tuple[int, ...] = ()
    # With tag_experts and init_from: these tags' experts start from this run's fresh weights, not
    # the warm start (warm_start.keep_fresh_experts).
    fresh_tags: tuple[int, ...] = ()
    seed: int = 0
    # The arena's knobs set over the scenario's (`ARENA_KNOBS`), e.g. {"bot_hp": 600}: sorted (name, value)
    # pairs here, a JSON object in config.json and `--set arena='{"bot_hp": 600}'`.
    arena: tuple[tuple[str, float], ...] = ()
    shaping_weight: float | None = None  # None: 0 for A, 1 for B
    recipe: str = "paper"  # which shaping `shaping_weight` scales (RECIPES)
    tag_period_ticks: int = 50
    tags: tuple[int, ...] = (0, 1, 2, 3)  # recipe B draws from these, uniformly (repeat one to weight it); A: unused
    init_from: str | None = None  # warm start: policy params of this run dir / packaged name (record only)

    def __post_init__(self):
        if self.combination not in COMBINATIONS:
            raise ValueError(f"combination must be one of {COMBINATIONS}, got {self.combination!r}")
        if self.env_id not in ARENA_IDS:
            raise ValueError(f"env_id must be one of {ARENA_IDS}, got {self.env_id!r}")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {self.scenario!r}")
        bots = tuple(self.bots)
        object.__setattr__(self, "bots", bots)
        unknown = [b for b in bots if b not in BOT_TYPES]
        if not bots or unknown:
            raise ValueError(f"bots must be a non-empty subset of {BOT_TYPES}, got {bots}")
        tags = tuple(int(t) for t in self.tags)
        object.__setattr__(self, "tags", tags)
        if not tags or any(not 0 <= t < NUM_TAGS for t in tags):
            raise ValueError(f"tags must be a non-empty list of tags in 0..{NUM_TAGS - 1}, got {tags}")
        frozen = tuple(int(t) for t in self.frozen_tags)
        object.__setattr__(self, "frozen_tags", frozen)
        if frozen and not self.tag_experts:
            raise ValueError("frozen_tags needs tag_experts=true: only a per-tag expert can be frozen")
        if any(not 0 <= t < NUM_TAGS for t in frozen):
            raise ValueError(f"frozen_tags must be tags in 0..{NUM_TAGS - 1}, got {frozen}")
        fresh = tuple(int(t) for t in self.fresh_tags)
        object.__setattr__(self, "fresh_tags", fresh)
        if fresh and not (self.tag_experts and self.init_from):
            raise ValueError("fresh_tags needs tag_experts=true and --init-from: it restarts experts of a warm start")
        if not set(fresh) <= set(tags) - set(frozen):
            raise ValueError(f"fresh_tags must be trained tags (in tags {tags}, not frozen), got {fresh}")
        object.__setattr__(self, "arena", arena_pairs(self.arena))
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {RECIPES}, got {self.recipe!r}")
        if int(self.memory) != self.memory or self.memory < 0:
            raise ValueError(f"memory must be a whole number of GRU units >= 0 (0: no memory), got {self.memory}")
        object.__setattr__(self, "memory", int(self.memory))
        if self.memory and self.tag_experts:
            raise ValueError("memory and tag_experts do not combine: the per-tag experts are MLPs")
        if self.memory and (self.num_envs * NUM_NPCS) % self.num_minibatches:
            raise ValueError(
                f"with memory, minibatches split the num_envs x 5 = {self.num_envs * NUM_NPCS} NPC sequences: "
                f"num_minibatches {self.num_minibatches} must divide them"
            )
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        if self.anneal_steps is not None:  # `--set anneal_steps=5e7` parses as a float
            object.__setattr__(self, "anneal_steps", int(self.anneal_steps))
            if self.anneal_steps < 1:
                raise ValueError(f"anneal_steps must be >= 1 or None (the whole run), got {self.anneal_steps}")
        if not 0.0 <= self.approach_shaping < float("inf"):
            raise ValueError(f"approach_shaping must be a finite weight >= 0 (0: off), got {self.approach_shaping}")
        if not 0.0 <= self.approach_range < float("inf"):
            raise ValueError(f"approach_range must be a finite distance >= 0 (arena units), got {self.approach_range}")
        if self.ent_target is not None and not 0.0 <= self.ent_target:
            raise ValueError(f"ent_target must be >= 0 (nats) or None, got {self.ent_target}")
        names = ("total_timesteps", "num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden")
        for name in (*names, "tag_period_ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if (self.num_envs * self.num_steps * 5) % self.num_minibatches:
            raise ValueError("num_envs * num_steps * 5 must be divisible by num_minibatches")

    # Derived sizes ---------------------------------------------------------
    @property
    def steps_per_update(self) -> int:
        """Env steps (arena ticks, all envs) per PPO update."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in the whole run (at least 1)."""
        return max(1, self.total_timesteps // self.steps_per_update)

    @property
    def anneal_grad_steps(self) -> int:
        """Adam steps over which lr and ent_coef anneal: `anneal_steps`' updates (default the run's)."""
        updates = self.num_updates if self.anneal_steps is None else max(1, self.anneal_steps // self.steps_per_update)
        return updates * self.update_epochs * self.num_minibatches

    @property
    def minibatch_size(self) -> int:
        return self.num_envs * self.num_steps * 5 // self.num_minibatches

    @property
    def effective_shaping_weight(self) -> float:
        if self.shaping_weight is not None:
            return float(self.shaping_weight)
        return 0.0 if self.combination == "A" else 1.0

    # JSON ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name in ("bots", "tags", "frozen_tags", "fresh_tags"):  # as JSON and `--set` spell them
            d[name] = list(getattr(self, name))
        d["arena"] = dict(self.arena)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PPOConfig:
        """Build from a dict, ignoring unknown keys (forward compatibility)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for name in ("bots", "tags"):
            if name in kw:
                kw[name] = tuple(kw[name])
        return cls(**kw)

    @property
    def effective_tag_one_hot(self) -> bool:
        if self.tag_one_hot is not None:
            return bool(self.tag_one_hot)
        return self.combination == "B"

    def network_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the config's network (`networks.network_of`)."""
        kwargs = {"hidden": self.hidden, "activation": self.activation, "tag_one_hot": self.effective_tag_one_hot}
        if self.tag_experts:  # absent otherwise, so older runs' kwargs compare equal
            kwargs["tag_experts"] = True
        if self.memory:  # likewise: a feed-forward run's kwargs are what they always were
            kwargs["memory"] = self.memory
        return kwargs

    def replace(self, **changes) -> PPOConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def fast(cls, **changes) -> PPOConfig:
        """The fast recipe: the same network and arena mix, fewer gradient samples per env step.

        See `FAST_RECIPE` and docs/training.md ("The fast recipe"); `changes` override any field.
        """
        return cls(**{**FAST_RECIPE, **changes})

    @classmethod
    def preset(cls, name: str, **changes) -> PPOConfig:
        """The config of a named preset (`PRESETS`), with `changes` applied."""
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {name!r}")
        return cls(**{**PRESETS[name], **changes})


def field_changes(items, fields) -> dict[str, Any]:
    """`KEY=VALUE` items, as `--set` takes them, as config changes: VALUE read as JSON (numbers, true/false,
    lists), else kept as a string (e.g. activation=relu). Raises KeyError(item) for an item that is not KEY=VALUE
    with KEY in `fields` (a bare KEY too: it would set the field to ""), and ValueError naming the field and
    the type it wants for a value of the wrong type (`lr=abc`), both before any config is built."""
    changes = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in fields:
            raise KeyError(item)
        changes[key] = parse_field(key, raw)
    return changes


def parse_field(name: str, raw: str) -> Any:
    """`raw` (as typed on a command line) as a value of PPOConfig field `name`, checked against its type.

    JSON spellings are read (`3e-4`, `true`, `null`, `["evasive"]`); a bare word is a string. Raises
    ValueError saying what the field takes.
    """
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    kind = _FIELD_TYPES[name]
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if value is None and optional:
        return None
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "tuple[int, ...]": lambda v: isinstance(v, list) and all(isinstance(x, int) for x in v),
        "tuple[tuple[str, float], ...]": lambda v: isinstance(v, dict),
    }[base]
    if not ok(value):
        wants = {
            "tuple[str, ...]": 'a JSON list of strings, e.g. ["evasive"]',
            "tuple[int, ...]": "a JSON list of ints",
            "tuple[tuple[str, float], ...]": 'a JSON object of arena knobs, e.g. {"bot_hp": 600}',
        }
        raise ValueError(
            f"{name}={raw}: {name} takes {wants.get(base, base)}{' or null' if optional else ''}, got {raw!r}"
        )
    if base == "int":
        return int(value)
    if base == "float":
        return float(value)
    if base == "tuple[tuple[str, float], ...]":
        return dict(arena_pairs(value))  # as config.json spells it; ValueError naming a knob that is not one
    return value


#: Each field's type as written in the dataclass (a string: `from __future__ import annotations`).
_FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(PPOConfig)}


#: The fast recipe's fields (the rest are the defaults). On a CPU ~70% of the default
#: update is gradient steps and their cost scales with epochs x samples, so one epoch
#: instead of two nearly halves an update's cost; twice the minibatches keep the default's
#: eight Adam steps per update at its learning rate. (One epoch of four minibatches at twice
#: the learning rate was measured too: it never learned the evasive bot in 16M steps.)
#: Measured in benchmarks/time_to_policy.py and benchmarks/train_throughput.py.
FAST_RECIPE: dict[str, Any] = {"update_epochs": 1, "num_minibatches": 8}


#: The evasive drill: the fast recipe with every arena fighting the evasive bot. On the shipped
#: 4:1:1 mix (evasive, aggressive, balanced) most seeds never learned to corner the evasive bot
#: or learned it and lost it again; on the evasive bot alone 4 seeds of 5 beat it, and the
#: balanced and aggressive bots it never saw, in 59-108 s of training on a 2-core CPU, where the
#: shipped recipe passed 1 of 5 (docs/benchmarks.md, "Time to policy").
FAST_EVASIVE_RECIPE: dict[str, Any] = {**FAST_RECIPE, "bots": ["evasive"]}


#: The default recipe for Combination A: the evasive drill plus the approach shaping, paid from
#: afar only, a constant entropy bonus and a 1.2e7-step schedule. A squad that fails on the drill
#: alone learns to retreat from the evasive bot and let the clock run out (docs/training.md, "Why
#: seeds failed"); the potential pays each NPC for closing in to the orb range (12 u) and leaves
#: the best policy unchanged. With the entropy bonus annealed to 0 every seed reached the policy
#: bars and then lost the evasive bot as its entropy fell; kept at 0.02, the final policies keep
#: them (docs/training.md, "Passing is not keeping").
LEARNING_RECIPE: dict[str, Any] = {
    **FAST_EVASIVE_RECIPE,
    "approach_shaping": 0.5,
    "approach_range": 12.0,
    "ent_coef_end": None,
    "total_timesteps": 12_000_000,
}


#: Named recipes for `jaxarena-train --preset`: "default" is the recipe a new Combination A run
#: gets; "classic" is the PPOConfig defaults, which every zoo card's command was trained with. Every
#: preset spells out every field any preset changes, so that resuming a run with another preset is
#: refused; as lists, not tuples, as config.json spells them, so a resume that names its own preset
#: again compares equal.
_RECIPES: dict[str, dict[str, Any]] = {
    "default": LEARNING_RECIPE,
    "classic": {},
    "fast": FAST_RECIPE,
    "fast_evasive": FAST_EVASIVE_RECIPE,
}
_PRESET_FIELDS = {k: v for k, v in PPOConfig().to_dict().items() if any(k in r for r in _RECIPES.values())}
PRESETS: dict[str, dict[str, Any]] = {name: {**_PRESET_FIELDS, **recipe} for name, recipe in _RECIPES.items()}


def default_preset(combination: str) -> str:
    """The preset a new run of `combination` starts from when none is named: "default" for A;
    "classic" for B, whose recipes start from a trained A and need every bot in the batch."""
    return "default" if combination == "A" else "classic"
