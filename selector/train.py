"""Trains the RL selector of Combination C: `jaxarena-train-selector --out runs/c`.

PPO (`algorithms.ppo_core`) on the 5 s decision MDP (`decision_env`), with
the frozen squad policy playing the chosen tags and the LLM's answers read
from its strategy table. With learned-bot slots, a bot is first trained with
PPO against the squad (`algorithms.bot_training`, the squad playing random
tags), keeping a checkpoint every `bot_steps`; the selector then trains in
generations, and before each the bot's next checkpoint fills a slot of the
population, so later generations meet stronger RL-trained bots.

Everything goes to `--out`: `config.json`, `metrics.jsonl` (one row per
chunk of updates, with decisions/s and env-steps/s), `curves.png`, and
`selector.msgpack` (the network, optimiser state, population and progress),
rewritten atomically after every chunk, and with learned bots `bots.msgpack`
(their checkpoints) and `bot_metrics.json`. Re-running with the same `--out`
resumes from it (episodes in flight restart), so a crash loses one chunk.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from jaxarena.algorithms.ppo_core import CoreConfig, make_core_trainer
from jaxarena.cli_errors import ArgumentParser, cli_main
from jaxarena.names import BOT_TYPES

from .inputs import CANDIDATE_STYLES, InputConfig
from .network import CandidateSelector
from .population import make_population

POPULATIONS = ("population", "scripted")
CHECKPOINT = "selector.msgpack"
BOTS = "bots.msgpack"


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
    template = _bot_template(config) if config.slots else None
    population = make_population(
        base, variants=config.population == "population", learned_slots=config.slots, bot_weights_template=template
    )
    table = load_table(config.table)
    env = DecisionEnv(arena, policy, squad_params, population, table, config.inputs, config.num_envs)
    return env, CandidateSelector(), (policy, squad_params), population


def _host_row(metrics: dict, i: int) -> dict:
    row = {k: float(np.asarray(v)[i]) for k, v in metrics.items()}
    for bot in BOT_TYPES + ("learned",):
        episodes = row.pop(f"episodes/{bot}", float("nan"))
        wins = row.pop(f"win/{bot}", float("nan"))
        row[f"win_rate/{bot}"] = wins / episodes if episodes > 0 else float("nan")
    return row


def _save(out: Path, payload: dict) -> None:
    tmp = out / (CHECKPOINT + ".tmp")
    tmp.write_bytes(serialization.msgpack_serialize(payload))
    os.replace(tmp, out / CHECKPOINT)


def train(config: SelectorConfig, out: str | Path, progress: bool = True) -> dict:
    """Runs (or resumes) a selector training run into `out`; returns the final metrics row."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved_config = out / "config.json"
    if saved_config.exists() and json.loads(saved_config.read_text()) != dataclasses.asdict(config):
        raise ValueError(f"{out} holds a run with another config ({saved_config}); use a new --out")
    saved_config.write_text(json.dumps(dataclasses.asdict(config), indent=2))

    env, network, (squad_policy, squad_params), population = build(config)
    trainer = make_core_trainer(env, network, config.core())
    state = trainer.init(jax.random.PRNGKey(config.seed))
    bots = _learned_bots(config, squad_policy, squad_params, out, progress)
    if (out / CHECKPOINT).exists():
        target = dict(train_state=state.train_state, population=population, rng=state.rng, update=0)
        saved = serialization.from_state_dict(target, serialization.msgpack_restore((out / CHECKPOINT).read_bytes()))
        population = saved["population"]
        state = trainer.init(jnp.asarray(saved["rng"]))  # fresh lanes, drawn from the restored population
        env_state = state.env_state.replace(population=population)
        state = state.replace(train_state=saved["train_state"], env_state=env_state, update=jnp.int32(saved["update"]))
    run_updates = jax.jit(trainer.run_updates, static_argnums=1)
    metrics_path = out / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    rows = [r for r in rows if r["update"] <= int(state.update)]

    total = config.num_updates
    generations = max(config.slots, 1)
    per_generation = math.ceil(total / generations)
    decisions_per_update = config.num_envs * config.num_steps
    while int(state.update) < total:
        generation = int(state.update) // per_generation
        filled = state.env_state.population.learned_filled
        if config.slots and filled <= generation:
            # The bot trainer's next checkpoint joins the population for this generation on.
            population = state.env_state.population.with_learned_bot(filled, bots[filled])
            state = state.replace(env_state=state.env_state.replace(population=population))
            filled += 1
            _log(progress, f"generation {generation + 1}: learned bot checkpoint {filled}/{config.slots} joins")
        n = min(config.chunk_updates, total - int(state.update), per_generation * (generation + 1) - int(state.update))
        t0 = time.perf_counter()
        state, metrics = run_updates(state, n)
        jax.block_until_ready(metrics)
        elapsed = time.perf_counter() - t0
        new_rows = [_host_row(metrics, i) for i in range(n)]
        decisions = n * decisions_per_update
        for r in new_rows:
            r["decisions"] = r["update"] * decisions_per_update
            r["learned_bots"] = filled
        new_rows[-1]["decisions_per_s"] = decisions / elapsed
        new_rows[-1]["env_steps_per_s"] = decisions * env.steps_per_period / elapsed
        rows += new_rows
        with open(metrics_path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        payload = {
            "train_state": serialization.to_state_dict(state.train_state),
            "population": serialization.to_state_dict(state.env_state.population),
            "rng": np.asarray(state.rng),
            "update": int(state.update),
        }
        _save(out, payload)
        last = new_rows[-1]
        _log(
            progress,
            f"update {int(state.update)}/{total}  win {last['win']:.2f}  "
            + "  ".join(f"{b[:4]} {last[f'win_rate/{b}']:.2f}" for b in BOT_TYPES)
            + f"  entropy {last['entropy']:.2f}  {last['decisions_per_s']:.0f} decisions/s",
        )
    plot_curves(rows, out / "curves.png")
    return rows[-1]


def _bot_template(config: SelectorConfig):
    from jaxarena.learned_bot import init_bot_weights

    return init_bot_weights(jax.random.PRNGKey(0))


def _learned_bots(config: SelectorConfig, squad_policy, squad_params, out: Path, progress: bool) -> list:
    """The learned bot's checkpoints, one per slot, oldest first: trained once (against the
    squad playing random tags), stored in `bots.msgpack`, and read back on resume."""
    if not config.slots:
        return []
    path = out / BOTS
    template = [_bot_template(config)] * config.slots
    if path.exists():
        return serialization.from_state_dict(template, serialization.msgpack_restore(path.read_bytes()))
    import jaxarena
    from jaxarena.algorithms.bot_training import train_bot

    env_id = getattr(squad_policy, "env_id", "Arena-v0")
    _, params = jaxarena.make(env_id, scenario=config.scenario)
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1000)
    steps = config.bot_steps * config.slots
    _log(progress, f"training the learned bot: {steps:,} env steps, {config.slots} checkpoints")
    t0 = time.perf_counter()
    bots, metrics = train_bot(
        squad_policy,
        squad_params,
        params,
        key,
        total_steps=steps,
        checkpoint_every=config.bot_steps,
        env_id=env_id,
        approach_shaping=config.bot_approach_shaping,
    )
    if len(bots) < config.slots:
        raise ValueError(
            f"bot_steps={config.bot_steps} gave {len(bots)} bot checkpoints for {config.slots} slots: "
            "make it at least one bot-training update (algorithms.bot_training.DEFAULT_CONFIG's num_envs x num_steps)"
        )
    bots = bots[-config.slots :]
    summary = {k: float(np.nanmean(np.asarray(metrics[k])[-5:])) for k in ("bot_win", "npc_win", "timeout")}
    _log(progress, f"learned bot trained in {time.perf_counter() - t0:.0f} s; last updates: {summary}")
    (out / "bot_metrics.json").write_text(
        json.dumps({k: np.asarray(v).tolist() for k, v in metrics.items()}, allow_nan=True)
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(serialization.msgpack_serialize(serialization.to_state_dict(bots)))
    os.replace(tmp, path)
    return bots


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def plot_curves(rows: list[dict], path: Path) -> Path | None:
    """Win rate per scripted bot and the mean decision reward against decisions seen."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(key, k=10):
        # Per-update rates are noisy (a few dozen episodes end per update): a trailing mean, NaN-aware.
        y = np.asarray([r.get(key, np.nan) for r in rows], float)
        seen = np.isfinite(y)
        sums, counts = np.cumsum(np.where(seen, y, 0.0)), np.cumsum(seen)
        lo = np.maximum(np.arange(len(y)) - k, -1)
        window_sum = sums - np.where(lo >= 0, sums[lo], 0.0)
        window_n = counts - np.where(lo >= 0, counts[lo], 0)
        return np.where(window_n > 0, window_sum / np.maximum(window_n, 1), np.nan)

    x = np.asarray([r["decisions"] for r in rows], float) / 1000.0
    fig, (ax_win, ax_reward) = plt.subplots(1, 2, figsize=(10, 3.6))
    for bot in BOT_TYPES + ("learned",):
        if np.any(np.isfinite([r.get(f"win_rate/{bot}", np.nan) for r in rows])):
            ax_win.plot(x, smooth(f"win_rate/{bot}"), label=bot if bot == "learned" else f"{bot} (+ variants)")
    ax_win.plot(x, smooth("win"), "k--", label="all members")
    ax_win.set(xlabel="decisions (thousands)", ylabel="squad win rate", ylim=(-0.02, 1.02), title="selector training")
    ax_win.legend(fontsize=8)
    ax_reward.plot(x, smooth("reward_mean"))
    ax_reward.set(xlabel="decisions (thousands)", ylabel="team reward per decision")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def export_selector(run_dir: str | Path, dest: str | Path) -> Path:
    """Copies a finished run's selector for shipping: the config, the network's parameters
    alone (no optimiser state or population), the metrics and the curves."""
    run_dir, dest = Path(run_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    raw = serialization.msgpack_restore((run_dir / CHECKPOINT).read_bytes())
    slim = {"train_state": {"params": raw["train_state"]["params"]}}
    (dest / CHECKPOINT).write_bytes(serialization.msgpack_serialize(slim))
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
        for checkpoint in sorted(root.glob(f"*/{CHECKPOINT}")):
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
    network = CandidateSelector()
    raw = serialization.msgpack_restore((directory / CHECKPOINT).read_bytes())
    params = jax.tree.map(jnp.asarray, raw["train_state"]["params"])
    return config, network, params


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
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SelectorConfig)}
    return SelectorConfig(**values), args


@cli_main("jaxarena-train-selector")
def main(argv=None) -> int:
    config, args = parse_args(argv)
    last = train(config, args.out, progress=not args.no_progress)
    print(json.dumps({"out": str(args.out), **{k: v for k, v in last.items() if "win" in k}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
