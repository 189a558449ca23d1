"""Decision datasets for tuning the tag model: states a squad visits, each priced by the oracle.

For each bot and each split (train, eval), the squad plays episodes with the
one runner twice: once with its tags from the tag model (the states it meets
when it plays as it does now), once with uniformly random tags (coverage of
states the model's own choices never reach). Every decision state of those
episodes, up to `states_per_part`, is priced by the oracle (`jaxarena.analysis.oracle`):
K playouts per tag, holding the tag, give Q(s, tag) as a win probability and
a mean return with its standard error.

Train and eval episodes come from disjoint seeds: part keys are
`fold_in(fold_in(key(seed), DATA_STREAM), part index)` with one part index per
(bot, split, source), and the split is part of the index. The stream constant
keeps every part's episodes apart from the protocol's evaluation episodes,
whose keys fold a bot index (0..2) straight into the seed's key.

The dataset is a directory: `config.json`, then one `part-<bot>-<split>-<source>.npz`
per part, each written atomically when it is done. Building again with the
same config skips the parts already there (so a killed build resumes);
another config in the same directory is refused.

Each part holds:
    features (M, 5) f32   the Table 10 state the model reads
    win, ret, ret_se (M, 4) f32, best (M,) i32   the oracle's Q per tag
    model_probs (M, 4) f32   the tag model's own probabilities (stock model for "llm")
    episode, period (M,) i32   where the state was met
and `prompts` (M,) str: the exact user message of the prompt.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.files import write_atomic
from jaxarena.key_streams import DATA_STREAM
from jaxarena.names import BOT_TYPES, NUM_TAGS

SPLITS = ("train", "eval")
SOURCES = ("llm", "random")
# Format 2: part keys fold in DATA_STREAM (format 1's parts 0-2 of seed 0 replayed the protocol's
# seed-0 evaluation keys, so held-out episodes shared spawns with training data).
DATA_FORMAT = 2


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What a decision dataset holds; see the module docstring."""

    scenario: str = "raid"
    policy: str = "B-obey-raid"
    bots: tuple[str, ...] = tuple(BOT_TYPES)
    episodes: int = 64  # per (bot, split, source)
    states_per_part: int = 256
    rollouts: int = 8
    seed: int = 0
    adapter: str | None = None  # the tag model's adapter for the "llm" source (None: the stock model)

    def __post_init__(self):
        unknown = [b for b in self.bots if b not in BOT_TYPES]
        if unknown or not self.bots:
            raise ValueError(f"bots must be among {', '.join(BOT_TYPES)}; got {self.bots}")
        for name in ("episodes", "states_per_part", "rollouts"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        object.__setattr__(self, "bots", tuple(self.bots))

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "bots": list(self.bots), "format": DATA_FORMAT}

    def part_index(self, bot: str, split: str, source: str) -> int:
        return (BOT_TYPES.index(bot) * len(SPLITS) + SPLITS.index(split)) * len(SOURCES) + SOURCES.index(source)


def part_key(seed: int, part: int) -> jax.Array:
    """The key of dataset part `part` (`DataConfig.part_index`) under `seed`."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), DATA_STREAM), part)


def part_path(root: Path, bot: str, split: str, source: str) -> Path:
    return root / f"part-{bot}-{split}-{source}.npz"


def random_tags(features, prev_tags, done, time_s, key):
    """A tag source that draws every decision's tag uniformly (coverage for the dataset)."""
    return jax.random.randint(key, prev_tags.shape, 0, NUM_TAGS, jnp.int32)


def _atomic_savez(dest: Path, **arrays) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(dest, buffer.getvalue())


def spread_decisions(result, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(periods, lanes) of up to `count` decisions really made in a rollout, evenly spread over them."""
    periods, lanes = np.nonzero(np.asarray(result.decision_active))
    pick = np.unique(np.linspace(0, len(periods) - 1, min(count, len(periods))).round().astype(int))
    return periods[pick], lanes[pick]


def _check_config(root: Path, config: DataConfig) -> None:
    path = root / "config.json"
    if path.exists():
        stored = json.loads(path.read_text())
        if stored != config.to_json():
            raise ValueError(f"{root} holds a dataset built with another config ({stored}); use a new --out directory")
    else:
        root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config.to_json(), indent=2, sort_keys=True))


def build_dataset(
    config: DataConfig,
    out: str | os.PathLike,
    tag_model,
    *,
    progress: Callable[[str], None] = print,
) -> Path:
    """Build (or resume) the dataset of `config` in directory `out`; returns its path.

    `tag_model` is a `tuning.model.TagModel` (the prompt limits must be the scenario's).
    """
    import jaxarena
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.analysis.oracle import make_pricer
    from jaxarena.protocol.policies import policy_env_id
    from jaxarena.runner import make_runner

    root = Path(out)
    _check_config(root, config)
    policy, policy_params = load_policy(config.policy)
    tag_state = tag_model.source.initial_state()
    tag_state["arrays"] = tag_model.arrays(tag_model.adapter)
    for bot in config.bots:
        env, params = jaxarena.make(policy_env_id(policy), bot=bot, scenario=config.scenario)
        pricer = None
        for split in SPLITS:
            for source in SOURCES:
                dest = part_path(root, bot, split, source)
                if dest.exists():
                    progress(f"{dest.name}: already built")
                    continue
                t0 = time.perf_counter()
                key = part_key(config.seed, config.part_index(bot, split, source))
                tags = tag_model.source.tag_fn() if source == "llm" else random_tags
                run = make_runner(env, params, policy, tags, config.episodes, record_states=True)
                kwargs = {"tag_state": tag_state} if source == "llm" else {}
                result = run(policy_params, params, key, **kwargs)
                periods, lanes = spread_decisions(result, config.states_per_part)
                states = jax.tree.map(lambda x, p=periods, n=lanes: x[p, n], result.decision_states)
                features = np.asarray(result.decision_features)[periods, lanes]
                if pricer is None or pricer[0] != len(periods):
                    pricer = (len(periods), make_pricer(env, params, policy, len(periods), rollouts=config.rollouts))
                values = pricer[1](policy_params, params, states, jax.random.fold_in(key, 1))
                probs = tag_model.probs(features)
                _atomic_savez(
                    dest,
                    features=features.astype(np.float32),
                    win=np.asarray(values.win),
                    ret=np.asarray(values.ret),
                    ret_se=np.asarray(values.ret_se),
                    best=np.asarray(values.best),
                    model_probs=probs,
                    episode=lanes.astype(np.int32),
                    period=periods.astype(np.int32),
                    prompts=np.asarray(tag_model.prompt_texts(features)),
                )
                progress(
                    f"{dest.name}: {len(periods)} states priced with K={config.rollouts} "
                    f"in {time.perf_counter() - t0:.1f} s (best tag counts {np.bincount(values.best, minlength=4)})"
                )
    return root


@dataclasses.dataclass(frozen=True)
class Decisions:
    """A split of a dataset, concatenated over parts: arrays with a leading (M,) axis."""

    features: np.ndarray
    win: np.ndarray
    ret: np.ndarray
    ret_se: np.ndarray
    best: np.ndarray
    bot: np.ndarray  # index into BOT_TYPES
    source: np.ndarray  # index into SOURCES
    rollouts: int

    def __len__(self) -> int:
        return len(self.features)


def load_split(root: str | os.PathLike, split: str) -> Decisions:
    """All parts of `split` in dataset directory `root`; ValueError if it has none."""
    root = Path(root)
    config = json.loads((root / "config.json").read_text())
    parts = []
    for bot in config["bots"]:
        for source in SOURCES:
            path = part_path(root, bot, split, source)
            if path.exists():
                with np.load(path) as z:
                    m = len(z["features"])
                    parts.append(
                        {k: z[k] for k in ("features", "win", "ret", "ret_se", "best")}
                        | {"bot": np.full(m, BOT_TYPES.index(bot)), "source": np.full(m, SOURCES.index(source))}
                    )
    if not parts:
        raise ValueError(f"{root}: no {split} parts; build the dataset first (jaxarena-tune-llm data)")
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return Decisions(**cat, rollouts=int(config["rollouts"]))
