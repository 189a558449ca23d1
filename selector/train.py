"""Trains the RL selector of Combination C: `jaxarena-train-selector --out runs/c`.

PPO (`algorithms.ppo_core`) on the 5 s decision MDP (`decision_env`), with
the frozen squad policy playing the chosen tags and the LLM's answers read
from its strategy table. With learned-bot slots, a bot is first trained with
PPO against the squad (`algorithms.bot_training`, the squad playing random
tags), keeping a checkpoint every `bot_steps`; the selector then trains in
generations, and before each the bot's next checkpoint fills a slot of the
population, so later generations meet stronger RL-trained bots.

Everything goes to `--out`: `config.json`, `metrics.jsonl`/`metrics.csv` (one
row per update, with decisions/s and env-steps/s), `curves.png`, and the
training driver's checkpoints (`checkpoints/`: the network, optimiser state,
population, the episodes in flight and progress) after every chunk; with
learned bots, `bot/` holds the bot's own run (its checkpoints and metrics).
Re-running with the same `--out` resumes both exactly where they stopped, so a
crash loses one chunk. `export_selector` writes the shipped form,
`selector.msgpack`, which `load_selector` reads beside run folders.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from jaxarena.algorithms import driver
from jaxarena.algorithms.batch_runs import run_fns
from jaxarena.algorithms.checkpoint import Checkpointer, has_checkpoint, load_saved_params
from jaxarena.algorithms.driver import stack, take, updates_done
from jaxarena.algorithms.ppo_core import CoreConfig, make_core_trainer
from jaxarena.algorithms.train_metrics import MetricsLog
from jaxarena.cli_errors import ArgumentParser, cli_main
from jaxarena.key_streams import learned_bot_key, selector_key
from jaxarena.learned_bot import init_bot_weights
from jaxarena.names import BOT_TYPES

from .curves import plot_curves
from .inputs import CANDIDATE_STYLES, InputConfig
from .network import CandidateSelector
from .population import make_population

POPULATIONS = ("population", "scripted")
#: A shipped selector's parameters (`export_selector`); a training run keeps the driver's checkpoints.
SHIPPED = "selector.msgpack"
#: Where a run's learned bot trains (its checkpoints and metrics), inside the run's folder.
BOT_DIR = "bot"


@dataclasses.dataclass(frozen=True)
class SelectorConfig:
    """One selector training run; every field is a CLI flag of the same name."""

    scenario: str = "paper"
    # The frozen tag-following squad (a name or a run directory). "B-experts" (docs/training.md,
    # "Pretrained policies"): its best tag differs by bot, so choosing tags can matter.
    squad: str = "B-experts"
    table: str = "smollm2-135m"  # the LLM's strategy table (a shipped name or a path)
    style: str = "iterative"
    deduction: bool = True
    population: str = "population"  # "scripted": the three scripted bots only (the ablation)
    learned_slots: int = 2  # RL-trained bots added during training (population only)
    bot_steps: int = 1_000_000  # bot-training env steps before each learned slot is filled
    bot_approach_shaping: float = 1.0  # train_bot's lead towards the squad (the shipped selectors' value)
    num_envs: int = 128
    num_steps: int = 8  # decisions per environment between updates
    total_decisions: int = 400_000  # the shipped selectors' budget: about 6-9 min on 2 cores
    chunk_updates: int = 20
    lr: float = 1e-3
    ent_coef: float = 0.01
    gamma: float = 0.99
    seed: int = 0

    def __post_init__(self):
        from jaxarena.scenarios import scenario_overrides

        scenario_overrides(self.scenario)  # raises, listing the presets
        if self.population not in POPULATIONS:
            raise ValueError(f"unknown population {self.population!r}; choose from {', '.join(POPULATIONS)}")
        if self.style not in CANDIDATE_STYLES:
            raise ValueError(f"unknown style {self.style!r}; choose from {', '.join(CANDIDATE_STYLES)}")
        for name in ("num_envs", "num_steps", "total_decisions", "chunk_updates"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learned_slots < 0 or self.bot_steps < 0:
            raise ValueError("learned_slots and bot_steps must be >= 0")

    @property
    def inputs(self) -> InputConfig:
        return InputConfig(style=self.style, deduction=self.deduction)

    @property
    def slots(self) -> int:
        return self.learned_slots if self.population == "population" else 0

    @property
    def num_updates(self) -> int:
        return max(1, self.total_decisions // (self.num_envs * self.num_steps))

    def core(self) -> CoreConfig:
        return CoreConfig(
            num_envs=self.num_envs,
            num_steps=self.num_steps,
            num_minibatches=4,
            update_epochs=4,
            lr=self.lr,
            total_updates=self.num_updates,
            ent_coef=self.ent_coef,
            gamma=self.gamma,
        )


def build(config: SelectorConfig):
    """(decision env, network, squad (policy, params), population) of a run."""
    import jaxarena
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.llm.strategy_table import load_table

    from .decision_env import DecisionEnv

    policy, squad_params = load_policy(config.squad)
    arena, base = jaxarena.make(getattr(policy, "env_id", "Arena-v0"), scenario=config.scenario)
    template = init_bot_weights(jax.random.PRNGKey(0)) if config.slots else None
    population = make_population(
        base, variants=config.population == "population", learned_slots=config.slots, bot_weights_template=template
    )
    table = load_table(config.table)
    env = DecisionEnv(arena, policy, squad_params, population, table, config.inputs, config.num_envs)
    return env, CandidateSelector(), (policy, squad_params), population


def _host_rows(metrics: dict, n: int, filled: int, decisions_per_update: int, per_s: float, ticks: int) -> list[dict]:
    """A chunk's n updates as metrics rows: win rates per bot, decisions, the learned bots in play, throughput."""
    rows = []
    for i in range(n):
        row = {k: float(np.asarray(v)[i]) for k, v in metrics.items()}
        for bot in BOT_TYPES + ("learned",):
            episodes = row.pop(f"episodes/{bot}", float("nan"))
            wins = row.pop(f"win/{bot}", float("nan"))
            row[f"win_rate/{bot}"] = wins / episodes if episodes > 0 else float("nan")
        row["update"] = int(row["update"])
        row["decisions"] = row["update"] * decisions_per_update
        row["learned_bots"] = filled
        # Throughput of the whole program (every seed's decisions), as a user of this command sees it.
        row["decisions_per_s"] = per_s
        row["env_steps_per_s"] = per_s * ticks  # `ticks` arena steps per decision
        rows.append(row)
    return rows


def train(config: SelectorConfig, out: str | Path, progress: bool = True, seeds: int = 1) -> dict | list[dict]:
    """Runs (or resumes) a selector training run into `out`; returns the final metrics row.

    With `seeds` > 1, seeds `config.seed`, `config.seed + 1`, ... train in one vmapped program, each
    in `out/seed_S` (its own config, learned bots, metrics and checkpoints, resumed together), and the
    final rows come back as a list, one per seed. The chunks, checkpoints and resume are the training
    driver's (`algorithms.driver`).
    """
    out = Path(out)
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    configs = [dataclasses.replace(config, seed=config.seed + i) for i in range(seeds)]
    dirs = [out] if seeds == 1 else [out / f"seed_{c.seed}" for c in configs]
    for c, d in zip(configs, dirs, strict=True):
        saved_config = d / "config.json"
        if saved_config.exists() and json.loads(saved_config.read_text()) != dataclasses.asdict(c):
            raise ValueError(f"{d} holds a run with another config ({saved_config}); use a new --out")
    for d in dirs:  # an earlier version kept a run in selector.msgpack: its selector loads, it does not resume
        if (d / SHIPPED).exists() and not has_checkpoint(d):
            raise ValueError(
                f"{d} holds a selector run of an earlier version ({SHIPPED}), which cannot be resumed: its "
                "selector still loads (load_selector); use a new --out to train again"
            )
    have = [has_checkpoint(d) for d in dirs]
    if any(have) and not all(have):
        raise ValueError(
            f"{out} holds checkpoints of {sum(have)} of these {seeds} seeds: use the command that made them"
        )
    for c, d in zip(configs, dirs, strict=True):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(dataclasses.asdict(c), indent=2))

    env, network, (squad_policy, squad_params), _ = build(config)
    trainer = make_core_trainer(env, network, config.core())
    batched = seeds > 1
    # One run, or the seeds' runs in one program: every leaf of a batched state has a leading seed axis.
    keys = jnp.stack([selector_key(c.seed) for c in configs]) if batched else selector_key(config.seed)
    init, run_updates = run_fns(trainer, batched)
    state = jax.jit(init)(keys)
    bots = [_learned_bots(c, squad_policy, squad_params, d, progress) for c, d in zip(configs, dirs, strict=True)]
    checkpointers = [Checkpointer(d, None, save_config=False) for d in dirs]
    try:
        return _train_chunks(config, env, run_updates, state, checkpointers, dirs, bots, have, progress)
    finally:
        for checkpointer in checkpointers:
            checkpointer.close()


def _train_chunks(config: SelectorConfig, env, run_updates, state, checkpointers, dirs, bots, have, progress):
    """The selector's run through the training driver (resumed where every seed saved), logged per update."""
    seeds, batched = len(dirs), len(dirs) > 1
    if all(have):
        state = driver.restore(checkpointers, state, batched, start_over="use a new --out to train again")
    logs = [MetricsLog(d, updates_done(state)) for d in dirs]

    total = config.num_updates
    generations = max(config.slots, 1)
    per_generation = math.ceil(total / generations)
    decisions_per_update = config.num_envs * config.num_steps

    def filled_slots(state) -> int:
        return int(np.asarray(state.env_state.population.learned_filled).reshape(-1)[0])

    def fill_generation(state):
        """Before a generation's first update, the bot trainer's next checkpoint joins the population."""
        generation, filled = updates_done(state) // per_generation, filled_slots(state)
        if not config.slots or filled > generation:
            return state
        pops = [take(state.env_state.population, i, batched) for i in range(seeds)]
        pops = [p.with_learned_bot(filled, b[filled]) for p, b in zip(pops, bots, strict=True)]
        population = stack(pops) if batched else pops[0]
        _log(progress, f"generation {generation + 1}: learned bot checkpoint {filled + 1}/{config.slots} joins")
        return state.replace(env_state=state.env_state.replace(population=population))

    steps = driver.chunks(
        run_updates,
        state,
        total,
        chunk=config.chunk_updates,
        checkpointers=checkpointers,
        batched=batched,
        stops=[per_generation * (g + 1) for g in range(generations)],
        before=fill_generation,
        say=lambda text: _log(progress, text),
    )
    for state, metrics, n, seconds in steps:
        decisions = n * decisions_per_update * seeds
        for i, log in enumerate(logs):
            rows = _host_rows(
                take(metrics, i, batched),
                n,
                filled_slots(state),
                decisions_per_update,
                decisions / seconds,
                env.steps_per_period,
            )
            log.append(rows)
        lasts = [log.rows[-1] for log in logs]
        _log(
            progress,
            f"update {updates_done(state)}/{total}  win {np.mean([last['win'] for last in lasts]):.2f}  "
            + "  ".join(f"{b[:4]} {np.nanmean([last[f'win_rate/{b}'] for last in lasts]):.2f}" for b in BOT_TYPES)
            + f"  entropy {np.mean([last['entropy'] for last in lasts]):.2f}"
            + f"  {lasts[0]['decisions_per_s']:.0f} decisions/s"
            + (f" ({seeds} seeds, means)" if batched else ""),
        )
    for log, d in zip(logs, dirs, strict=True):
        plot_curves(log.rows, d / "curves.png")
    return [log.rows[-1] for log in logs] if batched else logs[0].rows[-1]


def _learned_bots(config: SelectorConfig, squad_policy, squad_params, out: Path, progress: bool) -> list:
    """The learned bot's checkpoints, one per slot, oldest first: trained once (against the squad playing
    random tags) into `out/bot` through the training driver, and read back from there on resume."""
    if not config.slots:
        return []
    import jaxarena
    from jaxarena.algorithms.bot_training import train_bot

    env_id = getattr(squad_policy, "env_id", "Arena-v0")
    _, params = jaxarena.make(env_id, scenario=config.scenario)
    steps = config.bot_steps * config.slots
    _log(progress, f"the learned bot: {steps:,} env steps, {config.slots} checkpoints (in {out / BOT_DIR})")
    t0 = time.perf_counter()
    bots, metrics = train_bot(
        squad_policy,
        squad_params,
        params,
        learned_bot_key(config.seed),
        total_steps=steps,
        checkpoint_every=config.bot_steps,
        env_id=env_id,
        approach_shaping=config.bot_approach_shaping,
        out=out / BOT_DIR,
    )
    if len(bots) < config.slots:
        raise ValueError(
            f"bot_steps={config.bot_steps} gave {len(bots)} bot checkpoints for {config.slots} slots: "
            "make it at least one bot-training update (algorithms.bot_training.DEFAULT_CONFIG's num_envs x num_steps)"
        )
    summary = {k: float(np.nanmean(np.asarray(metrics[k])[-5:])) for k in ("bot_win", "npc_win", "timeout")}
    _log(progress, f"learned bot ready in {time.perf_counter() - t0:.0f} s; last updates: {summary}")
    return bots[-config.slots :]


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def export_selector(run_dir: str | Path, dest: str | Path) -> Path:
    """Copies a finished run's selector for shipping: the config, the network's parameters alone (no
    optimiser state or population) in the shipped format (`selector.msgpack`), the metrics and the curves."""
    run_dir, dest = Path(run_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    slim = {"train_state": {"params": load_saved_params(run_dir)}}
    (dest / SHIPPED).write_bytes(serialization.msgpack_serialize(serialization.to_state_dict(slim)))
    for name in ("config.json", "metrics.jsonl", "curves.png"):
        if (run_dir / name).exists():
            (dest / name).write_bytes((run_dir / name).read_bytes())
    return dest


PRETRAINED = Path(__file__).parent / "pretrained"
#: The shipped selectors kept as ablations or for the record (`pretrained/archive/NAME`), loaded by name too.
ARCHIVE = PRETRAINED / "archive"


def shipped_selectors() -> dict[str, Path]:
    """{name: directory} of every shipped selector, the archived ones included."""
    found = {}
    for root in (PRETRAINED, ARCHIVE):
        for checkpoint in sorted(root.glob(f"*/{SHIPPED}")):
            found.setdefault(checkpoint.parent.name, checkpoint.parent)
    return found


def selector_directory(path: str | Path) -> Path:
    """The directory of a selector spec: a run directory, or a shipped name ("C", or an archived "C-scripted")."""
    directory = Path(path)
    if directory.is_dir():
        return directory
    shipped = shipped_selectors()
    if str(path) not in shipped:
        raise FileNotFoundError(f"no selector at {path!r}; shipped selectors: {', '.join(sorted(shipped)) or 'none'}")
    return shipped[str(path)]


def load_selector(path: str | Path):
    """(config, network, params) of a trained selector: a run directory or a shipped name ("C")."""
    directory = selector_directory(path)
    config = SelectorConfig(**json.loads((directory / "config.json").read_text()))
    if has_checkpoint(directory):  # a training run: the driver's checkpoints
        return config, CandidateSelector(), load_saved_params(directory)
    # A shipped (exported) selector: its parameters alone, in the published format.
    raw = serialization.msgpack_restore((directory / SHIPPED).read_bytes())
    return config, CandidateSelector(), jax.tree.map(jnp.asarray, raw["train_state"]["params"])


def parse_args(argv=None) -> tuple[SelectorConfig, argparse.Namespace]:
    from jaxarena.scenarios import SCENARIOS

    p = ArgumentParser(prog="jaxarena-train-selector", description=__doc__.split("\n\n")[0])
    choices = {"scenario": list(SCENARIOS), "style": list(CANDIDATE_STYLES), "population": list(POPULATIONS)}
    for f in dataclasses.fields(SelectorConfig):
        flag = "--" + f.name.replace("_", "-")
        described = f"default {f.default}; see SelectorConfig in jaxarena.selector.train"
        if f.type in ("bool", bool):
            truth = lambda s: s.lower() in ("1", "true", "yes")  # noqa: E731
            p.add_argument(flag, type=truth, default=f.default, help=f"true/false ({described})")
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parse = (lambda s, k=kind: k(float(s))) if kind is int else kind  # "4e5" reads as an int
            p.add_argument(flag, type=parse, default=f.default, choices=choices.get(f.name), help=described)
    p.add_argument("--out", required=True, help="run directory (resumed if it holds a run)")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="train N seeds (--seed, --seed + 1, ...) in one vmapped program, each in OUT/seed_S",
    )
    p.add_argument("--no-progress", action="store_true", help="print no progress lines")
    args = p.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SelectorConfig)}
    return SelectorConfig(**values), args


@cli_main("jaxarena-train-selector")
def main(argv=None) -> int:
    config, args = parse_args(argv)
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    last = train(config, args.out, progress=not args.no_progress, seeds=args.seeds)
    for row in last if isinstance(last, list) else [last]:
        print(json.dumps({"out": str(args.out), **{k: v for k, v in row.items() if "win" in k}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
