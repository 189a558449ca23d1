"""`jaxarena-tune-llm`: build a decision dataset, then fine-tune the tag model on it.

    jaxarena-tune-llm data  --scenario raid --policy B-obey-raid --out runs/raid-data
    jaxarena-tune-llm train --method sft --data runs/raid-data --out runs/raid-sft
    jaxarena-tune-llm train --method dpo --data runs/raid-data --out runs/raid-dpo
    jaxarena-tune-llm train --method grpo --data runs/raid-data --out runs/raid-grpo   # plays; data for eval
    jaxarena-tune-llm evaluate --adapter runs/raid-sft/adapter --out runs/raid-study
    jaxarena-tune-llm glance --out runs/raid-glance     # the LLM learns the glance prompt from play
    jaxarena-tune-llm glance --learner table --out runs/raid-glance-table   # the same, an 18 x 4 table learns

`data`, `train` and `glance` resume: run the same command again after an interruption.
The studies that measure what other readers and glance tables win are scripts
in `studies/` (studies/README.md).
Errors are one line with what to do; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys

from jaxarena.cli_errors import RESUME_HINT, ArgumentParser, cli_main, interrupted
from jaxarena.config_files import config_from

from .squad_args import squad_args


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
    # The adapter a run starts from is set below, with the rank and targets it brings.
    config = config_from(TrainConfig, args, data=str(args.data), init_from=None)
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


def _glance(args) -> None:
    from jaxarena.cli_errors import UserError

    from ..backends.embedded import EmbeddedBackend
    from ..glance_model import GlanceModel
    from ..lora import LoraConfig
    from .glance import GlanceConfig, train_glance
    from .glance_report import finish, markdown

    if args.episodes < 1:
        raise UserError(f"--episodes must be at least 1, got {args.episodes}")
    fields = ("steps", "spawns", "group", "inner_steps", "beta", "memory", "lr", "rank", "seed", "ask", "learner")
    config = GlanceConfig(
        scenario=args.scenario,
        policy=args.policy,
        bots=tuple(args.bots),
        table_prior=args.table_prior,
        **{f: getattr(args, f) for f in fields},
    )
    # The table learner never loads the LLM: its prior is recorded (`glance_learner.STOCK_LOG_PROBS`).
    model = GlanceModel(EmbeddedBackend().load(), LoraConfig(rank=config.rank)) if config.learner == "llm" else None
    adapter, history = train_glance(config, args.out, model, progress=lambda line: print(line, flush=True))
    who = "the stock and the tuned LLM" if config.learner == "llm" else "the prior and the tuned table"
    print(f"playing {who} on {args.episodes} held-out paired episodes per bot ...", flush=True)
    result = finish(model, adapter, config, args.out, history, episodes=args.episodes, seed=args.eval_seed)
    print(markdown(result))
    saved = "the adapter to {}/adapter" if config.learner == "llm" else "the table to {}/table"
    print(f"written to {args.out}/glance.json, glance.md, curves.png and " + saved.format(args.out))


def _glance_parser(sub) -> None:
    """`glance`: its training run's sizes and coefficients, then the held-out play."""
    g = sub.add_parser(
        "glance",
        help="the LLM (or, with --learner table, a table) learns from the game's reward to answer the glance prompt "
        "(time since the fight began, nearest-NPC distance, the bot's approach, every 0.2 s), then plays held-out "
        "episodes beside the untrained one",
    )
    squad_args(g)
    g.add_argument("--steps", type=int, default=100, help="training steps (default %(default)s)")
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
    g.add_argument(
        "--learner",
        default="llm",
        choices=("llm", "table"),  # glance_learner.LEARNERS
        help="who learns: the LLM through a LoRA adapter (default), or an 18 x 4 table of logits, one row per glance "
        "prompt, trained by the same steps on the same keys without the LLM (what the LLM adds to a table)",
    )
    g.add_argument(
        "--table-prior",
        default="stock",
        choices=("stock", "uniform"),  # glance_learner.TABLE_PRIORS
        help="--learner table: where the table starts and what its KL term is taken to: the stock LLM's answer "
        "probabilities, recorded (default), or every answer alike",
    )
    g.add_argument(
        "--lr",
        type=float,
        default=None,
        help="Adam's learning rate (default 3e-4 for the LLM's adapter, 0.05 for the table)",
    )
    g.add_argument("--rank", type=int, default=8, help="the LoRA adapter's rank (default %(default)s; the LLM only)")
    g.add_argument("--seed", type=int, default=0, help="the training spawns' seed (a stream apart from the protocol's)")
    g.add_argument("--episodes", type=int, default=1000, help="held-out paired episodes per bot (default %(default)s)")
    g.add_argument("--eval-seed", type=int, default=0, help="the protocol's seed of the held-out episodes")
    g.add_argument("--out", required=True, help="run directory: checkpoint, curves, report, adapter (resumes)")
    g.set_defaults(fn=_glance)


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="jaxarena-tune-llm", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("data", help="play the squad, price its decision states with the oracle")
    squad_args(d)
    d.add_argument("--episodes", type=int, default=64, help="episodes per (bot, split, tag source)")
    d.add_argument("--states", type=int, default=256, help="decision states priced per (bot, split, tag source)")
    d.add_argument("--rollouts", type=int, default=8, help="the oracle's playouts per tag (K)")
    d.add_argument("--adapter", default=None, help="the tag model's adapter for its own states (default: stock)")
    d.add_argument("--seed", type=int, default=0, help="the seed of the dataset's episodes (apart from the protocol's)")
    d.add_argument("--out", required=True, help="dataset directory (resumes if it exists)")
    d.set_defaults(fn=_data)

    t = sub.add_parser("train", help="fine-tune a LoRA adapter on a dataset")
    t.add_argument(
        "--method",
        choices=("sft", "dpo", "grpo"),
        default="sft",
        help="SFT on the oracle's values, DPO on its preferences, or GRPO in play (default %(default)s)",
    )
    t.add_argument("--data", required=True, help="a dataset directory from `data`")
    t.add_argument("--out", required=True, help="run directory: checkpoint, metrics, curves, adapter")
    t.add_argument("--steps", type=int, default=150, help="training steps (default %(default)s)")
    t.add_argument("--batch", type=int, default=32, help="states per step (GRPO: states drawn from the play)")
    t.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate (default %(default)s)")
    t.add_argument("--tau", type=float, default=0.05, help="SFT: the target is softmax(Q / tau)")
    t.add_argument("--beta", type=float, default=0.5, help="DPO: the preference temperature")
    t.add_argument(
        "--teacher",
        choices=("logistic", "mlp"),
        default=None,
        help="SFT: learn the choices of this chooser fit to the oracle's values on the prompt's numbers",
    )
    t.add_argument("--rank", type=int, default=8, help="the LoRA adapter's rank (default %(default)s)")
    t.add_argument("--alpha", type=float, default=16.0, help="LoRA's alpha: updates are scaled by alpha / rank")
    t.add_argument("--targets", nargs="+", default=["q", "v"], help="projections to adapt (q k v o gate up down)")
    t.add_argument("--eval-every", type=int, default=25, help="steps between scores on the held-out states")
    t.add_argument("--init-from", default=None, help="start from this adapter (name or directory), e.g. GRPO after SFT")
    t.add_argument("--episodes", type=int, default=32, help="GRPO: episodes the model plays per step")
    t.add_argument("--group", type=int, default=8, help="GRPO: tags drawn and played out per state")
    t.add_argument("--inner-steps", type=int, default=2, help="GRPO: Adam steps per group")
    t.add_argument("--kl-coef", type=float, default=0.02, help="GRPO: weight of the exact KL to the base model")
    t.add_argument("--seed", type=int, default=0, help="seeds the batches' draws and GRPO's episodes")
    t.set_defaults(fn=_train)

    e = sub.add_parser("evaluate", help="the squad under the stock LLM (B) against the tuned LLM (L), paired")
    e.add_argument("--adapter", required=True, help="a shipped adapter name or an adapter directory")
    squad_args(e)
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

    _glance_parser(sub)
    return p


@cli_main("jaxarena-tune-llm")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # Every command but the table learner's runs the embedded model: stop before any work if its weights are missing.
    from ..backends.embedded import EmbeddedBackend
    from ..preflight import preflight

    if getattr(args, "learner", "llm") == "llm":
        preflight(EmbeddedBackend())
    try:
        args.fn(args)
    except KeyboardInterrupt:  # `data`, `train` and `glance` checkpoint as they go
        return interrupted("jaxarena-tune-llm", RESUME_HINT if args.fn in (_data, _train, _glance) else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
