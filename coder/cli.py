"""`jaxarena-coder`: the planner -> coder -> critic loop of SMAC-R1 (docs/coder.md, "The loop").

    jaxarena-coder --llm embedded --k 2 --rounds 1 --episodes-per-bot 1000
    jaxarena-coder --llm ollama --model qwen2.5-coder:7b --k 8 --rounds 10

Writes results/coder/<run>/ (prompts, replies, code, scores, events.jsonl,
report.md with the best program and a GIF). Rerunning the same command
resumes an interrupted run; --rounds may be raised to extend a finished one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jaxarena.cli_errors import RESUME_HINT, ArgumentParser, cli_main, interrupted
from jaxarena.config_files import config_from
from jaxarena.names import BOT_TYPES


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="jaxarena-coder",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--llm", default="embedded", help="backend: embedded (default), ollama, gguf:PATH")
    p.add_argument("--model", default=None, help="Ollama model (default qwen2.5-coder:7b); only with --llm ollama")
    p.add_argument("--host", default=None, help="Ollama server URL (default $OLLAMA_HOST or http://127.0.0.1:11434)")
    p.add_argument("--k", type=int, default=4, help="candidate programs per round (default 4)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seeds the episodes and the LLM's sampling")
    p.add_argument("--episodes-per-bot", type=int, default=1000, help="episodes per bot per candidate (default 1000)")
    p.add_argument("--scenario", default="paper", help="arena preset (jaxarena.scenarios; default paper)")
    p.add_argument("--bots", nargs="+", default=list(BOT_TYPES), help="bots to score against (default all three)")
    p.add_argument("--lanes", type=int, default=2048, help="episodes played side by side when scoring")
    p.add_argument(
        "--race",
        action="store_true",
        help="race the candidates: stop playing one once it is shown worse than the best so far (docs/coder.md)",
    )
    p.add_argument("--race-alpha", type=float, default=None, help="with --race: chance of dropping a better one (0.05)")
    p.add_argument("--race-first", type=int, default=None, help="with --race: episodes per bot of the first look (30)")
    p.add_argument("--max-tokens", type=int, default=768, help="new tokens per LLM reply (default 768)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-request limit for Ollama (default 600)")
    p.add_argument("--gif-bot", default="balanced", help="bot of the report's GIF (default balanced)")
    p.add_argument("--out", default="results/coder", help="parent folder of runs (default results/coder)")
    p.add_argument("--run", default=None, help="run folder name (default: from the settings, so a rerun resumes)")
    p.add_argument(
        "--coder-adapter",
        default=None,
        help="a LoRA adapter for the coder's replies only (a directory or a shipped name; jaxarena-tune-coder)",
    )
    p.add_argument("--no-progress", action="store_true", help="no per-candidate and per-round lines")
    return p


@cli_main("jaxarena-coder")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from jaxarena.llm.backends import parse_llm_spec

    backend_name, _ = parse_llm_spec(args.llm)  # a ValueError naming the accepted forms
    if backend_name == "ollama" and "jax" not in sys.modules:
        # Scoring is env-heavy: XLA's YNNPACK fusions halve the arena's speed on CPU (README, "Speed"). Not with
        # an in-process model, whose matrix products they speed up. Only before JAX is imported: afterwards
        # the flag would not reach this process, only leak into its children (e.g. a caller's test servers).
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

    from .loop import Loop
    from .loop_config import LoopConfig, LoopError, run_name

    given = [
        flag for flag, v in (("--race-alpha", args.race_alpha), ("--race-first", args.race_first)) if v is not None
    ]
    if given and not args.race:
        raise LoopError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} only for --race")

    # A LoopError (bad settings, an LLM that cannot answer) is the one error line of `cli_main`.
    config = config_from(
        LoopConfig,
        args,
        race_alpha=LoopConfig.race_alpha if args.race_alpha is None else args.race_alpha,
        race_first=LoopConfig.race_first if args.race_first is None else args.race_first,
    )
    run_dir = Path(args.out) / (args.run or run_name(config))
    loop = Loop(config, run_dir, progress=None if args.no_progress else lambda line: print(line, flush=True))
    try:
        best = loop.run()
    except KeyboardInterrupt:  # the loop resumes from its run folder
        return interrupted("jaxarena-coder", f"{RESUME_HINT} ({run_dir})")
    if best is not None:
        print(f"best: round {best['round']} candidate {best['candidate']}: reward {best['score'].reward:+.3f}")
    print(f"report: {run_dir / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
