"""Many PPO runs in one compiled program: seeds, and settings of the float hyper-parameters.

PureJaxRL trains seeds with `jax.vmap(train)(keys)`; this module does the same for checkpointed,
chunked runs, and for sweeps:

    from jaxarena.algorithms import PPOConfig
    from jaxarena.algorithms.multi_run import make_batch_trainer, plan_runs

    runs = plan_runs(PPOConfig(), seeds=range(8), sweep={"lr": ["1e-4", "3e-4"]})   # 16 runs
    for group in group_runs(runs):                   # runs that share one program
        batch = make_batch_trainer(group)
        state = batch.init()                          # every leaf (len(group), ...)
        state, metrics = jax.jit(batch.run_updates, static_argnums=1)(state, 10)

Runs share a program when their configs differ only in `seed` and the `SWEEPABLE` floats, which
the runner state carries (`RunnerState.hyper`). A sweep over a field that changes shapes or the
program (`num_envs`, `hidden`, `bots`, ...) makes one group per value, trained one after another.

With several devices and a run count they divide, the runs are split over the devices (each run's
arenas stay on one device); otherwise the batch sits on one device.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxarena.key_streams import training_key
from jaxarena.types import EnvParams

from .arena_knobs import ARENA_KNOBS, ARENA_PREFIX, arena_pairs
from .batch_runs import init_runs, run_fns
from .config import SWEEPABLE, PPOConfig, parse_field
from .ppo import RunnerState, make_trainer
from .ppo_core import Trainer
from .ppo_objective import hyper_of

RUN_AXIS = "run"


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of a batch: its folder name under the output folder, its config (seed included)
    and the sweep setting it stands for, as (field, value as typed) pairs."""

    name: str
    config: PPOConfig
    setting: tuple[tuple[str, str], ...] = ()

    @property
    def setting_name(self) -> str:
        """The setting as a folder name and table label, e.g. "lr=1e-4,ent_coef=0.02" ("" without a sweep)."""
        return ",".join(f"{k}={v}" for k, v in self.setting)


def parse_sweep(items: Iterable[str]) -> dict[str, list[str]]:
    """`KEY=V1,V2,...` items (`--sweep`) as {field: [value as typed, ...]}; every value is checked against
    the field's type here (ValueError), before anything runs. A JSON list value keeps its commas:
    `bots=["evasive"];["evasive","balanced"]` separates values with `;` where a value holds a comma."""
    fields = {f.name for f in dataclasses.fields(PPOConfig)} - {"seed", "combination", "arena"}
    sweep: dict[str, list[str]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        knob = key.startswith(ARENA_PREFIX) and key.removeprefix(ARENA_PREFIX) in ARENA_KNOBS
        if not sep or key not in fields and not knob:
            raise ValueError(
                f"--sweep {item!r}: not KEY=V1,V2 with KEY a PPOConfig field ({', '.join(sorted(fields))}) "
                f"or arena.KNOB ({', '.join(ARENA_KNOBS)})"
            )
        values = raw.split(";") if ";" in raw else raw.split(",")
        if len(values) != len(set(values)) or not all(values):
            raise ValueError(f"--sweep {item!r}: values must be distinct and non-empty")
        for value in values:
            _setting_value(key, value)
        sweep[key] = values
    return sweep


def plan_runs(base: PPOConfig, seeds: Sequence[int], sweep: Mapping[str, Sequence[str]] | None = None) -> list[Run]:
    """Every (setting, seed) run of a sweep's grid, in grid order then seed order.

    Run names are folders: "seed_3", or "lr=1e-4/seed_3" under a sweep. A config a setting makes
    invalid raises ValueError naming the setting.
    """
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    sweep = dict(sweep or {})
    runs = []
    for values in itertools.product(*sweep.values()):
        setting = tuple(zip(sweep, values, strict=True))
        changes = {k: _setting_value(k, v) for k, v in setting if not k.startswith(ARENA_PREFIX)}
        knobs = {k.removeprefix(ARENA_PREFIX): _setting_value(k, v) for k, v in setting if k.startswith(ARENA_PREFIX)}
        if knobs:
            changes["arena"] = {**dict(base.arena), **knobs}
        for seed in seeds:
            try:
                config = base.replace(**changes, seed=seed)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"setting {dict(setting)}: {exc}") from None
            prefix = ",".join(f"{k}={v}" for k, v in setting)
            runs.append(Run(f"{prefix}/seed_{seed}" if prefix else f"seed_{seed}", config, setting))
    return runs


def _setting_value(key: str, raw: str):
    """A sweep value as typed, read as its field's; an arena knob's as a number the arena's rules allow."""
    if not key.startswith(ARENA_PREFIX):
        return parse_field(key, raw)
    name = key.removeprefix(ARENA_PREFIX)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key}={raw}: an arena knob takes a finite number") from None
    return dict(arena_pairs({name: value}))[name]  # the one check of a knob: finite, and the arena's rules


def program_of(config: PPOConfig) -> PPOConfig:
    """`config` with what a runner state carries set aside (seed, `SWEEPABLE`, the arena knobs' values, not
    which knobs are set): equal for runs that can share a compiled program."""
    carried = {name: getattr(PPOConfig(), name) for name in SWEEPABLE}
    knobs = {name: EnvParams.__dataclass_fields__[name].default for name, _ in config.arena}  # the paper's values
    return config.replace(seed=0, arena=knobs, **carried)


def group_runs(runs: Sequence[Run]) -> list[list[Run]]:
    """`runs` split into the batches that share a program, in first-seen order."""
    groups: dict[PPOConfig, list[Run]] = {}
    for run in runs:
        groups.setdefault(program_of(run.config), []).append(run)
    return list(groups.values())


class BatchTrainer(NamedTuple):
    """A batch of runs that share one program.

    `init()` gives the stacked runner state of every run's fresh start (leaves (runs, ...));
    `run_updates(state, n)` runs n updates of every run (vmapped; jit it with n static);
    `mesh` splits the run axis over devices (None: one device); `trainer` is one run's program.
    """

    runs: tuple[Run, ...]
    trainer: Trainer
    init: Callable[[], RunnerState]
    run_updates: Callable[[RunnerState, int], tuple[RunnerState, dict]]
    mesh: Mesh | None

    def place(self, tree):
        """`tree` (leaves with a leading run axis) put on the batch's devices, split along the runs."""
        if self.mesh is None:
            return tree
        return jax.device_put(tree, NamedSharding(self.mesh, P(RUN_AXIS)))


def run_mesh(num_runs: int) -> Mesh | None:
    """A 1-D mesh over every device when they divide `num_runs`; None on one device."""
    devices = jax.devices()
    if len(devices) < 2 or num_runs % len(devices):
        return None
    return Mesh(devices, (RUN_AXIS,))


def make_batch_trainer(runs: Sequence[Run], mesh: Mesh | None | str = "auto") -> BatchTrainer:
    """The batch program of `runs`, which must share one (`group_runs`); see `BatchTrainer`."""
    runs = tuple(runs)
    if not runs:
        raise ValueError("make_batch_trainer needs at least one run")
    program = program_of(runs[0].config)
    strays = [r.name for r in runs if program_of(r.config) != program]
    if strays:
        raise ValueError(f"runs {strays} need another program than {runs[0].name!r}: split them with group_runs")
    if isinstance(mesh, str):
        mesh = run_mesh(len(runs))
    trainer = make_trainer(runs[0].config, mesh=None)  # one run's arenas on one device
    keys = jnp.stack([training_key(r.config.seed) for r in runs])
    hypers = jax.tree.map(lambda *xs: jnp.stack(xs), *[hyper_of(r.config) for r in runs])

    def init() -> RunnerState:
        return init_runs(trainer, keys, hypers)

    return BatchTrainer(runs, trainer, init, run_fns(trainer, batched=True)[1], mesh)
