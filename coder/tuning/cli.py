"""`jaxarena-tune-coder`: fine-tune the coder's LLM on the squad-policy language (SFT, then GRPO), and measure it.

    jaxarena-tune-coder train --method sft --out runs/coder-sft
    jaxarena-tune-coder train --method grpo --init-from runs/coder-sft/adapter --out runs/coder-grpo
    jaxarena-tune-coder evaluate --adapter runs/coder-sft/adapter --out runs/coder-sft/eval.json
    jaxarena-tune-coder compare runs/coder-sft/eval.json runs/coder-grpo/eval.json   # reply by reply
    jaxarena-coder --llm embedded --coder-adapter runs/coder-grpo/adapter   # the loop with the tuned coder

`train` resumes: run the same command again after an interruption. The
evaluation prompts are the held-out plans, never trained on. Errors are one
line with what to do; `--debug` shows the traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from jaxarena import host_memory
from jaxarena.cli_errors import RESUME_HINT, ArgumentParser, cli_main, interrupted
from jaxarena.config_files import config_from

from .train import METHODS, CoderTuneConfig


def _context(scenario: str, max_new_tokens: int, adapter: str | None = None):
    """(generator, reference, task): the embedded model and the loop's coder context for `scenario`."""
    from jaxarena import make
    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.generate import GGUFGenerator

    from ..language import reference_text
    from ..prompts import task_information

    _, params = make("Arena-v0", scenario=scenario)
    generator = GGUFGenerator(
        max_new_tokens=max_new_tokens,
        batch_buckets=(1, 2, 4, 8),
        suffix_buckets=(128, 256, 512),
        adapter=resolve_adapter(adapter, kind="coder-adapter") if adapter else None,
    )
    return generator, reference_text(), task_information(params, scenario, 1000)


def _split(config: CoderTuneConfig, out: Path):
    from ..score_types import ScoreConfig
    from .examples import build_examples

    score_config = ScoreConfig(episodes_per_bot=config.filter_episodes, scenario=config.scenario, seed=config.seed)
    return build_examples(out, held_out=config.held_out, seed=config.seed, score_config=score_config)


def _train(args) -> None:
    from ..prompts import coder_system
    from .model import CoderModel
    from .train import train_coder

    config = config_from(CoderTuneConfig, args)
    if args.init_from:  # before the filter's minutes of scoring
        from jaxarena.llm.adapters import resolve_adapter

        resolve_adapter(args.init_from, kind="coder-adapter")
    out = Path(args.out)
    train, held, _ = _split(config, out)
    print(f"{len(train)} training programs (after the filter), {len(held)} held-out plans")
    generator, reference, task = _context(args.scenario, config.max_new_tokens)
    model = CoderModel(generator, coder_system(reference, task))
    adapter = train_coder(config, model, train, held, out, reference=reference, task=task)
    print(f"adapter saved to {adapter}")


def _evaluate(args) -> None:
    from ..score_types import ScoreConfig
    from .evaluate import evaluate_coder
    from .examples import split, variants

    if args.plans < 1 or args.candidates < 1 or not 0.0 <= args.held_out < 1.0:
        raise ValueError("--plans and --candidates must be >= 1 and --held-out in [0, 1)")
    if Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a directory; give the JSON file to write")
    _, held = split(variants(), args.held_out, args.seed)  # the plans only: nothing to score here
    held = held[: args.plans]
    if args.adapter:
        _check_held_out(args.adapter, [e.name for e in held])
    plans = [e.plan for e in held]
    generator, reference, task = _context(args.scenario, args.max_new_tokens, args.adapter)
    score_config = ScoreConfig(episodes_per_bot=args.episodes_per_bot, scenario=args.scenario, seed=args.seed + 1)
    summary, records = evaluate_coder(
        generator, reference, task, plans, candidates=args.candidates, score_config=score_config
    )
    summary = {"adapter": args.adapter, "plans": len(plans), "candidates": args.candidates, **summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "replies": records}, indent=1))
    print(json.dumps(summary))


def _compare(args) -> None:
    from .evaluate import paired_comparison

    before, after = (json.loads(Path(path).read_text())["replies"] for path in (args.before, args.after))
    print(json.dumps(paired_comparison(before, after)))


def _check_held_out(adapter: str, names: list[str]) -> None:
    """Refuse to score an adapter on plans it was trained on (its card lists its held-out examples)."""
    from jaxarena.llm.adapters import resolve_adapter

    card = json.loads((resolve_adapter(adapter, kind="coder-adapter") / "card.json").read_text())
    kept_out = card.get("examples", {}).get("held_out")
    trained = [n for n in names if isinstance(kept_out, list) and n not in kept_out]
    if trained:
        raise ValueError(
            f"{adapter} was trained on {len(trained)} of these plans (e.g. {trained[0]}): "
            "evaluate with the --seed and --held-out it was trained with"
        )


def _common(p) -> None:
    p.add_argument("--scenario", default="paper", help="the arena the programs are written for and scored on")
    p.add_argument("--seed", type=int, default=0, help="seeds the split, the draws and the scoring")
    p.add_argument("--held-out", type=float, default=0.25, help="share of the variants kept out of training")
    p.add_argument("--filter-episodes", type=int, default=100, help="episodes per bot when filtering the variants")
    p.add_argument("--max-new-tokens", type=int, default=448, help="reply length limit, in tokens")
    p.add_argument(
        "--episodes-per-bot", type=int, default=50, help="episodes per bot when scoring a reply (GRPO, evaluate)"
    )


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="jaxarena-tune-coder", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="SFT on the baselines and their variants, or GRPO on the game's reward")
    t.add_argument(
        "--method",
        choices=METHODS,
        default="sft",
        help="SFT on the baselines and their variants, or GRPO on the game's reward (default %(default)s)",
    )
    t.add_argument("--out", required=True, help="run directory: examples, checkpoint, metrics, curves, adapter")
    t.add_argument("--steps", type=int, default=60, help="training steps (default %(default)s)")
    t.add_argument("--batch", type=int, default=2, help="SFT examples per step")
    t.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default %(default)s)")
    t.add_argument("--rank", type=int, default=8, help="the LoRA adapter's rank (default %(default)s)")
    t.add_argument("--eval-every", type=int, default=10, help="steps between logged points and checkpoints")
    t.add_argument("--init-from", default=None, help="start from this adapter (a directory or a shipped name)")
    t.add_argument("--group", type=int, default=4, help="GRPO: replies sampled per plan")
    t.add_argument("--kl-coef", type=float, default=0.05, help="GRPO: weight of the exact KL to the run's start")
    t.add_argument("--temperature", type=float, default=0.7, help="GRPO: sampling temperature of the group")
    t.add_argument(
        "--draw-seed",
        type=int,
        default=None,
        help="seeds the draws (a fresh adapter, plan order, GRPO's replies and scoring) instead of --seed, which still "
        "fixes the split: "
        "a replicate run on the same held-out plans",
    )
    _common(t)
    e = sub.add_parser("evaluate", help="replies to the held-out plans: share with code, that ran, mean reward")
    e.add_argument("--adapter", default=None, help="a coder adapter (directory or shipped name); none: stock")
    e.add_argument("--out", required=True, help="JSON file for the summary and every reply")
    e.add_argument("--plans", type=int, default=8, help="held-out plans to answer")
    e.add_argument("--candidates", type=int, default=2, help="replies per plan (the loop's candidates 1..k)")
    _common(e)
    c = sub.add_parser("compare", help="two evaluations of the same prompts, reply by reply: the paired difference")
    c.add_argument("before", help="an `evaluate` JSON file")
    c.add_argument("after", help="an `evaluate` JSON file of the same prompts")
    return parser


@cli_main("jaxarena-tune-coder")
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "train":
        # Before JAX starts its threads: the training step's blocks exceed a thread arena's 64 MB heaps.
        host_memory.keep_freed_memory(one_arena=True)
    try:
        {"train": _train, "evaluate": _evaluate, "compare": _compare}[args.command](args)
    except KeyboardInterrupt:  # `train` checkpoints as it goes
        return interrupted("jaxarena-tune-coder", RESUME_HINT if args.command == "train" else "")
    return 0
