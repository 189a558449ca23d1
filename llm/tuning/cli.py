"""`jaxarena-tune-llm`: build a decision dataset, then fine-tune the tag model on it.

    jaxarena-tune-llm data  --scenario raid --policy B-obey-raid --out runs/raid-data
    jaxarena-tune-llm train --method sft --data runs/raid-data --out runs/raid-sft
    jaxarena-tune-llm train --method dpo --data runs/raid-data --out runs/raid-dpo
    jaxarena-tune-llm train --method grpo --data runs/raid-data --out runs/raid-grpo   # plays; data for eval
    jaxarena-tune-llm evaluate --adapter runs/raid-sft/adapter --out runs/raid-study
    jaxarena-tune-llm history-bound --out runs/raid-history-bound   # what a richer prompt could win
    jaxarena-tune-llm look-first --out runs/raid-look-first         # ... and a faster decision period
    jaxarena-tune-llm glance --out runs/raid-glance                 # the LLM learns the glance prompt from play
    jaxarena-tune-llm glance-play --tables smollm2-raid-glance --out runs/glance-play   # what glance tables win
    jaxarena-tune-llm glance-regret --tables smollm2-raid-glance --out runs/glance-regret   # what one change adds

`data`, `train` and `glance` resume: run the same command again after an interruption.
Errors are one line with what to do; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys

from jaxarena.cli_errors import RESUME_HINT, ArgumentParser, cli_main, interrupted
from jaxarena.names import BOT_TYPES


def _scenario_limits(scenario: str) -> dict:
    """The prompt's maxima for a scenario: the bot's and an NPC's full HP there."""
    import jaxarena

    _, params = jaxarena.make(scenario=scenario)
    return {"bot_max_hp": float(params.bot_hp), "npc_max_hp": float(params.npc_hp)}


def _data(args) -> None:
    from .data import DataConfig, build_dataset
    from .model import TagModel

    config = DataConfig(
        scenario=args.scenario,
        policy=args.policy,
        bots=tuple(args.bots),
        episodes=args.episodes,
        states_per_part=args.states,
        rollouts=args.rollouts,
        seed=args.seed,
        adapter=args.adapter,
    )
    model = TagModel.load(limits=_scenario_limits(args.scenario), adapter=args.adapter)
    build_dataset(config, args.out, model)
    print(f"dataset ready in {args.out}")


def _train(args) -> None:
    import dataclasses
    import json
    from pathlib import Path

    from ..lora import LoraConfig
    from .data import load_split
    from .model import TagModel
    from .train import TrainConfig, train

    data_config = json.loads((Path(args.data) / "config.json").read_text())
    config = TrainConfig(
        method=args.method,
        data=str(args.data),
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        tau=args.tau,
        beta=args.beta,
        rank=args.rank,
        alpha=args.alpha,
        targets=tuple(args.targets),
        eval_every=args.eval_every,
        seed=args.seed,
        episodes=args.episodes,
        group=args.group,
        inner_steps=args.inner_steps,
        kl_coef=args.kl_coef,
        teacher=args.teacher,
    )
    limits = _scenario_limits(data_config["scenario"])
    if args.init_from:
        # Start from a trained adapter (e.g. GRPO after SFT); its rank and targets are the run's.
        model = TagModel.load(limits=limits, adapter=args.init_from)
        config = dataclasses.replace(
            config, rank=model.lora.rank, alpha=model.lora.alpha, targets=model.lora.targets, init_from=args.init_from
        )
    else:
        model = TagModel.load(
            limits=limits, lora=LoraConfig(rank=config.rank, alpha=config.alpha, targets=config.targets)
        )
    train_split = None if config.method == "grpo" else load_split(args.data, "train")
    train(config, model, train_split, load_split(args.data, "eval"), args.out)


def _evaluate(args) -> None:
    from ..lora import adapter_checksum
    from .evaluate import compare, markdown, write_report
    from .model import TagModel

    limits = _scenario_limits(args.scenario)
    model = TagModel.load(limits=limits, adapter=args.adapter)
    extra = {}
    if args.bound_data:
        # What reading the prompt can win: choosers fit on the five numbers, played beside L.
        from .bound import fit_tag_source
        from .data import load_split

        train_split = load_split(args.bound_data, "train")
        extra = {
            "prompt-logistic": fit_tag_source(train_split, limits, tau=0.05),
            "prompt-mlp": fit_tag_source(train_split, limits, tau=0.05, hidden=(64, 64)),
        }
    report = compare(
        model,
        model.adapter,
        scenario=args.scenario,
        policy_spec=args.policy,
        bots=tuple(args.bots),
        episodes=args.episodes,
        seed=args.seed,
        price_states=args.price_states,
        rollouts=args.rollouts,
        extra_choosers=extra,
    )
    report["adapter"] = {"spec": args.adapter, "checksum": adapter_checksum(model.adapter)}
    out = write_report(report, args.out)
    print(markdown(report))
    print(f"written to {out}/study.json and study.md")


def _play_readers(args, run, markdown, name: str, counts: tuple[str, ...] = ("episodes",), **kwargs) -> None:
    """`history-bound`, `look-first`, `glance-play` and `glance-regret`: check the episode counts, play, print the
    table, say where it went."""
    from jaxarena.cli_errors import UserError

    for field in counts:
        if getattr(args, field) < 1:
            raise UserError(f"--{field.replace('_', '-')} must be at least 1, got {getattr(args, field)}")
    result = run(
        scenario=args.scenario,
        policy_spec=args.policy,
        out=args.out,
        episodes=args.episodes,
        seed=args.seed,
        bots=tuple(args.bots),
        **kwargs,
    )
    print(markdown(result))
    print(f"written to {args.out}/{name}.json and {name}.md")


def _history_bound(args) -> None:
    from .history_bound import markdown, run_history_bound

    counts = ("episodes", "search_episodes")
    _play_readers(args, run_history_bound, markdown, "history_bound", counts, search_episodes=args.search_episodes)


def _look_first(args) -> None:
    from .look_first import markdown, run_look_first

    _play_readers(args, run_look_first, markdown, "look_first", period_s=args.period, window_s=args.window)


def _glance(args) -> None:
    from jaxarena.cli_errors import UserError

    from ..backends.embedded import EmbeddedBackend
    from ..lora import LoraConfig
    from .glance import GlanceConfig, GlanceModel, train_glance
    from .glance_report import finish, markdown

    if args.episodes < 1:
        raise UserError(f"--episodes must be at least 1, got {args.episodes}")
    fields = ("steps", "spawns", "group", "inner_steps", "beta", "memory", "lr", "rank", "seed", "ask")
    config = GlanceConfig(
        scenario=args.scenario, policy=args.policy, bots=tuple(args.bots), **{f: getattr(args, f) for f in fields}
    )
    model = GlanceModel(EmbeddedBackend().load(), LoraConfig(rank=config.rank))
    adapter, history = train_glance(config, args.out, model, progress=lambda line: print(line, flush=True))
    print(f"playing the stock and the tuned LLM on {args.episodes} held-out paired episodes per bot ...", flush=True)
    result = finish(model, adapter, config, args.out, history, episodes=args.episodes, seed=args.eval_seed)
    print(markdown(result))
    print(f"written to {args.out}/glance.json, glance.md, curves.png and the adapter to {args.out}/adapter")


def _check_tables(tables) -> None:
    """An adapter's answers come from the embedded model: stop before any play if its weights are missing."""
    from .glance_play import is_written_table

    if not all(map(is_written_table, tables)):
        from ..backends.embedded import EmbeddedBackend
        from ..preflight import preflight

        preflight(EmbeddedBackend())


def _glance_play(args) -> None:
    from .glance_play import markdown, run_glance_play

    _check_tables(args.tables)
    _play_readers(args, run_glance_play, markdown, "glance_play", tables=args.tables)


def _glance_regret(args) -> None:
    from jaxarena.cli_errors import UserError

    from .glance_regret import markdown, run_glance_regret

    confirm = args.seed + 1 if args.confirm_seed is None else args.confirm_seed
    if confirm == args.seed:
        raise UserError(
            f"--confirm-seed must differ from --seed (both {confirm}): the best change is confirmed on other keys"
        )
    _check_tables(args.tables)
    _play_readers(args, run_glance_regret, markdown, "glance_regret", tables=args.tables, confirm_seed=confirm)


def _reader_args(p, name: str, held_out: bool) -> None:
    """The arguments `history-bound`, `look-first`, `glance-play` and `glance-regret` share: the squad, its arena,
    the episodes, the output."""
    which = "held-out " if held_out else ""
    p.add_argument("--scenario", default="raid")
    p.add_argument("--policy", default="B-obey-raid")
    p.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    p.add_argument(
        "--episodes",
        type=int,
        default=100,
        help=f"{which}paired episodes per bot (the protocol's keys; default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help=f"the protocol's seed of the {which}episodes")
    p.add_argument("--out", required=True, help=f"directory for {name}.json and {name}.md")


def _table_parsers(sub) -> None:
    """`glance-play` and `glance-regret`: glance tables played, and their one-answer neighbours."""
    g = sub.add_parser(
        "glance-play",
        help="what glance tables are worth: each table (18 tag initials, or a glance adapter's most likely "
        "answers) played beside always Aggressive on paired episodes",
    )
    g.add_argument("--tables", nargs="+", required=True, help="tables: e.g. AAAAAAAAAAAAAARFAF, or adapter names")
    _reader_args(g, "glance_play", held_out=False)
    g.set_defaults(fn=_glance_play, episodes=1000, needs_llm=False)  # an adapter named in --tables checks itself

    r = sub.add_parser(
        "glance-regret",
        help="a glance table's regret: every one-answer change in the cells its games reach, played beside it on "
        "paired episodes; the best change per bot confirmed on other keys (always Aggressive, the stock LLM's "
        "table, is measured too)",
    )
    r.add_argument("--tables", nargs="*", default=[], help="tables: e.g. AAAAAAAAAAAAAARFAF, or adapter names")
    r.add_argument(
        "--confirm-seed", type=int, help="the protocol's seed of the confirming episodes (default: --seed + 1)"
    )
    _reader_args(r, "glance_regret", held_out=False)
    r.set_defaults(fn=_glance_regret, episodes=1000, needs_llm=False)


def _glance_parser(sub) -> None:
    """`glance`: its training run's sizes and coefficients, then the held-out play."""
    g = sub.add_parser(
        "glance",
        help="the LLM learns from the game's reward to answer the glance prompt (time since the fight began, "
        "nearest-NPC distance, the bot's approach, every 0.2 s), then plays held-out episodes beside the stock LLM",
    )
    g.add_argument("--scenario", default="raid")
    g.add_argument("--policy", default="B-obey-raid")
    g.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    g.add_argument("--steps", type=int, default=100)
    g.add_argument("--spawns", type=int, default=32, help="groups per bot and step, each asking about one cell")
    g.add_argument("--group", type=int, default=8, help="lanes per group: each answer in the asked cell, G/4 times")
    g.add_argument("--inner-steps", type=int, default=2, help="Adam steps per training step")
    g.add_argument("--beta", type=float, default=0.1, help="how far the target may move from the base model")
    g.add_argument("--memory", type=float, default=0.95, help="per-step decay of the advantages play has shown")
    g.add_argument(
        "--ask",
        default="any",
        choices=("any", "visited"),  # glance.ASK_RULES, without importing JAX to build the parser
        help="the cell a group asks about: any cell, or one a scout lane of its spawn glanced in (no group wasted)",
    )
    g.add_argument("--lr", type=float, default=3e-4)
    g.add_argument("--rank", type=int, default=8)
    g.add_argument("--seed", type=int, default=0, help="the training spawns' seed (a stream apart from the protocol's)")
    g.add_argument("--episodes", type=int, default=1000, help="held-out paired episodes per bot (default %(default)s)")
    g.add_argument("--eval-seed", type=int, default=0, help="the protocol's seed of the held-out episodes")
    g.add_argument("--out", required=True, help="run directory: checkpoint, curves, report, adapter (resumes)")
    g.set_defaults(fn=_glance)


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="jaxarena-tune-llm", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("data", help="play the squad, price its decision states with the oracle")
    d.add_argument("--scenario", default="raid")
    d.add_argument("--policy", default="B-obey-raid", help="the squad (a shipped name or a run directory)")
    d.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    d.add_argument("--episodes", type=int, default=64, help="episodes per (bot, split, tag source)")
    d.add_argument("--states", type=int, default=256, help="decision states priced per (bot, split, tag source)")
    d.add_argument("--rollouts", type=int, default=8, help="the oracle's playouts per tag (K)")
    d.add_argument("--adapter", default=None, help="the tag model's adapter for its own states (default: stock)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", required=True, help="dataset directory (resumes if it exists)")
    d.set_defaults(fn=_data)

    t = sub.add_parser("train", help="fine-tune a LoRA adapter on a dataset")
    t.add_argument("--method", choices=("sft", "dpo", "grpo"), default="sft")
    t.add_argument("--data", required=True, help="a dataset directory from `data`")
    t.add_argument("--out", required=True, help="run directory: checkpoint, metrics, curves, adapter")
    t.add_argument("--steps", type=int, default=150)
    t.add_argument("--batch", type=int, default=32, help="states per step (GRPO: states drawn from the play)")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--tau", type=float, default=0.05, help="SFT: the target is softmax(Q / tau)")
    t.add_argument("--beta", type=float, default=0.5, help="DPO: the preference temperature")
    t.add_argument(
        "--teacher",
        choices=("logistic", "mlp"),
        default=None,
        help="SFT: learn the choices of this chooser fit to the oracle's values on the prompt's numbers",
    )
    t.add_argument("--rank", type=int, default=8)
    t.add_argument("--alpha", type=float, default=16.0)
    t.add_argument("--targets", nargs="+", default=["q", "v"], help="projections to adapt (q k v o gate up down)")
    t.add_argument("--eval-every", type=int, default=25)
    t.add_argument("--init-from", default=None, help="start from this adapter (name or directory), e.g. GRPO after SFT")
    t.add_argument("--episodes", type=int, default=32, help="GRPO: episodes the model plays per step")
    t.add_argument("--group", type=int, default=8, help="GRPO: tags drawn and played out per state")
    t.add_argument("--inner-steps", type=int, default=2, help="GRPO: Adam steps per group")
    t.add_argument("--kl-coef", type=float, default=0.02, help="GRPO: weight of the exact KL to the base model")
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(fn=_train)

    e = sub.add_parser("evaluate", help="the squad under the stock LLM (B) against the tuned LLM (L), paired")
    e.add_argument("--adapter", required=True, help="a shipped adapter name or an adapter directory")
    e.add_argument("--scenario", default="raid")
    e.add_argument("--policy", default="B-obey-raid")
    e.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    e.add_argument("--episodes", type=int, default=100, help="paired episodes per bot")
    e.add_argument("--seed", type=int, default=0, help="the protocol's seed: episodes pair with its cells")
    e.add_argument("--price-states", type=int, default=0, help="decisions per bot priced by the oracle (0: none)")
    e.add_argument("--rollouts", type=int, default=8, help="the oracle's playouts per tag when pricing")
    e.add_argument(
        "--bound-data",
        default=None,
        help="a dataset: also play a softmax regression and an MLP fit on its prompts' numbers (the prompt's bound)",
    )
    e.add_argument("--out", required=True, help="directory for study.json and study.md")
    e.set_defaults(fn=_evaluate)

    h = sub.add_parser(
        "history-bound",
        help="what a prompt with the bot's movement could win: a tag table over distance and approach, searched "
        "on training episodes and played on held-out ones",
    )
    _reader_args(h, "history_bound", held_out=True)
    h.add_argument("--search-episodes", type=int, default=200, help="training episodes per bot (seed + 1's keys)")
    h.set_defaults(fn=_history_bound, needs_llm=False)  # it plays tag tables, not the LLM

    f = sub.add_parser(
        "look-first",
        help="what a reader of the bot's first moves wins at a short decision period: Retreat where the bot "
        "closed in during the first seconds, else Aggressive, against always Aggressive, paired",
    )
    _reader_args(f, "look_first", held_out=False)
    f.add_argument("--period", type=float, default=0.2, help="seconds between decisions (the paper's is 5)")
    f.add_argument("--window", type=float, default=1.4, help="seconds from spawn in which the reader may retreat")
    f.set_defaults(fn=_look_first, needs_llm=False)  # a rule reader, not the LLM

    _glance_parser(sub)

    _table_parsers(sub)
    return p


@cli_main("jaxarena-tune-llm")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "needs_llm", True):
        # The command runs the embedded model: stop before any work if its weights are not installed.
        from ..backends.embedded import EmbeddedBackend
        from ..preflight import preflight

        preflight(EmbeddedBackend())
    try:
        args.fn(args)
    except KeyboardInterrupt:  # `data`, `train` and `glance` checkpoint as they go
        return interrupted("jaxarena-tune-llm", RESUME_HINT if args.fn in (_data, _train, _glance) else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
