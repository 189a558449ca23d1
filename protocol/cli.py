"""`jaxarena-evaluate` / `scripts/evaluate.py`: the paper's 600-episode protocol in one command.

    jaxarena-evaluate                                   # shipped policies + embedded LLM, 100 episodes/cell
    jaxarena-evaluate --episodes 1000 --seed 1
    jaxarena-evaluate --llm ollama --model mistral      # the paper's set-up (needs `ollama serve`)
    jaxarena-evaluate --llm gguf:ollama:mistral         # Ollama's Mistral GGUF run by our JAX code, no server
    jaxarena-evaluate --llm gguf:models/qwen2.gguf      # any local llama/Mistral or qwen2 GGUF
    jaxarena-evaluate --policy-a runs/a --policy-b runs/b
    jaxarena-evaluate --combinations A B F O --price-decisions   # + fixed tags, the oracle, B's regret
    jaxarena-evaluate --combinations A W                # A beside the white-box squads (docs/coder.md)
    jaxarena-evaluate --combinations A B C O            # + the RL selector and its ablations
    jaxarena-evaluate --config results/RUN/config.json --out again   # a run's settings, played again

Outputs go to `results/<run-id>/` (see `protocol.summary`). The default run id
is derived from the configuration, so running the same command again resumes
a killed run (finished cells are loaded, never recomputed); `--fresh`
discards stored cells first.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jaxarena.cli_errors import ArgumentParser, cli_main
from jaxarena.files import check_folder
from jaxarena.llm.backends import LLM_SPECS, parse_llm_spec
from jaxarena.llm.choice import DECODE_MODES
from jaxarena.names import BOT_TYPES
from jaxarena.scenarios import DEFAULT_SCENARIO, SCENARIOS

from ..llm.paths import LLM_PATHS
from . import combinations
from .config import DEFAULT_COMBINATIONS, DEFAULT_ORACLE_ROLLOUTS, ProtocolConfig
from .policies import policy_env_id
from .runner import ProtocolRunner
from .tables import fallback_warning


def default_run_id(config: ProtocolConfig) -> str:
    """A readable id plus a hash of the whole config: the same command maps to the same directory."""
    digest = hashlib.sha256(json.dumps(config.identity_dict(), sort_keys=True).encode()).hexdigest()[:8]
    model = (config.model or "mistral").replace(":", "_").replace("/", "_")
    llm = config.llm if config.llm == "embedded" else f"{config.llm}-{model}"
    if config.llm.startswith("gguf:"):
        # A path is no directory name: keep the file's stem (or the Ollama name), made safe.
        stem = Path(config.llm.removeprefix("gguf:").removeprefix("ollama:")).stem or "model"
        llm = "gguf-" + "".join(c if c.isalnum() or c in "-." else "_" for c in stem)
    if config.adapter:
        llm += "-lora-" + "".join(c if c.isalnum() or c in "-." else "_" for c in Path(config.adapter).name)
    return f"{llm}-n{config.episodes}-seed{config.seed}-{digest}"


def evaluate(
    config: ProtocolConfig | None = None,
    out: str | Path = "results",
    run_id: str | None = None,
    *,
    fresh: bool = False,
    cache_path: str | Path | None | bool = True,
    progress: bool = True,
    figures: bool = True,
    after_cell: Callable[[str, dict], None] | None = None,
    preflight: bool = True,
) -> dict:
    """Runs (or resumes) the protocol and writes every output; returns the summary dict.

    cache_path: True (default) uses `<out>/llm_cache.jsonl`, shared by all runs
    under `out`, so a re-run is warm; a path uses that file; None/False disables it.
    preflight: check the LLM before computing its cells, stopping with the fix
    (`jaxarena.llm.preflight.BackendUnavailable`) if it cannot answer; without
    it such a run plays on, every decision a fallback.
    """
    start = time.perf_counter()
    config = config or ProtocolConfig()
    run_id = run_id or default_run_id(config)
    run_dir = Path(out) / run_id
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    new_dirs = [d for d in (Path(out), run_dir) if not d.exists()]
    run_dir.mkdir(parents=True, exist_ok=True)
    if cache_path is True:
        cache_path = Path(out) / "llm_cache.jsonl"
    elif cache_path is False:
        cache_path = None

    from .summary import write_outputs

    try:
        runner = ProtocolRunner(
            config, run_dir, cache_path=cache_path, progress=progress, after_cell=after_cell, preflight=preflight
        )
    except BaseException:
        _remove_empty(new_dirs)
        raise
    try:
        cells = runner.run()
        policies = {}
        for label in config.labels():
            for name, (spec, policy, _, checksum, source) in runner.squads(label).items():
                policies[name] = {"spec": spec, "source": source, "sha256": checksum, "env_id": policy_env_id(policy)}
        # What the combinations played with, for summary.json (the LLM's identity and path, C's selectors).
        identities = {}
        for name in config.combinations:
            identities.update(combinations.get(name).meta(runner.context, config))
    except BaseException:
        runner.close()
        _remove_empty(new_dirs)  # a run that failed before writing anything leaves no empty folders behind
        raise
    runner.close()
    meta = {
        "run_id": run_id,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "policies": policies,
        "llm": identities.pop("llm", None),
        **identities,
        "session": {
            **runner.session,
            "computed_cells": runner.computed,
            "loaded_cells": [n for n in cells if n not in runner.computed],
            "session_wall_s": time.perf_counter() - start,
        },
    }
    summary = write_outputs(run_dir, cells, config, meta, figures=figures)
    summary["run_dir"] = str(run_dir)
    return summary


def _remove_empty(new_dirs: list[Path]) -> None:
    """Removes the folders this run created, innermost first, where they hold no file."""
    for directory in reversed(new_dirs):
        if directory.is_dir() and not any(p.is_file() for p in directory.rglob("*")):
            shutil.rmtree(directory)


def _llm_spec(text: str) -> str:
    try:
        parse_llm_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def build_parser() -> argparse.ArgumentParser:
    """The run's flags, the LLM's, then one group per combination that has options (its own flags)."""
    p = ArgumentParser(
        prog="jaxarena-evaluate",
        description="Run the paper's evaluation protocol (Combinations A and B x 3 bots; optionally the other "
        "combinations of --combinations) and write episodes.csv, decisions.jsonl, summary.json, report.md and figures.",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the run's settings from a .json or .toml file (a run's config.json plays that run again); "
        "options given beside it override it",
    )
    p.add_argument("--episodes", type=int, default=100, help="episodes per (combination, bot) cell (default 100)")
    p.add_argument("--seed", type=int, default=0, help="base seed; every combination shares it (paired design)")
    p.add_argument("--bots", default=",".join(BOT_TYPES), help="comma-separated bot types (default: all three)")
    p.add_argument(
        "--combinations",
        nargs="+",
        default=list(DEFAULT_COMBINATIONS),
        metavar="C",
        help=f"combinations to run, from {' '.join(combinations.names())} (space- or comma-separated; default "
        f"{' '.join(DEFAULT_COMBINATIONS)}). "
        + "; ".join(f"{c.name}: {c.about}" for c in combinations.registry().values()),
    )
    p.add_argument(
        "--oracle-rollouts",
        type=int,
        default=DEFAULT_ORACLE_ROLLOUTS,
        metavar="K",
        help=f"the oracle's playouts per tag, for O and the pricing of B's and C's decisions (default "
        f"{DEFAULT_ORACLE_ROLLOUTS})",
    )
    p.add_argument(
        "--scenario",
        choices=tuple(SCENARIOS),
        default=DEFAULT_SCENARIO,
        help=f"arena preset for every cell (jaxarena.scenarios; default {DEFAULT_SCENARIO})",
    )
    p.add_argument(
        "--policy-b",
        default="B",
        metavar="SPEC",
        help="B's policy, which F, G, L, O and R play too: run dir, exported policy, or a shipped name ('B'; "
        "'B-paper': the paper recipe's B)",
    )
    p.add_argument("--greedy", action="store_true", help="take the most likely action instead of sampling")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples for win-rate CIs")
    p.add_argument("--out", default="results", help="output root (default results/)")
    p.add_argument("--run-id", default=None, help="results/<run-id>; default derived from the configuration")
    p.add_argument("--fresh", action="store_true", help="discard stored cells of this run id first")
    p.add_argument("--cache", default=None, help="LLM prompt cache file (default <out>/llm_cache.jsonl)")
    p.add_argument("--no-cache", action="store_true", help="no prompt cache: every prompt goes to the LLM")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument(
        "--no-preflight",
        action="store_true",
        help="do not check the LLM before its cells (one cheap request to the server; without it, a run whose "
        "LLM cannot answer plays on with every decision a fallback)",
    )
    _add_llm_options(p.add_argument_group("the LLM", "B's tag selector; L plays the same model with its adapter"))
    for combination in combinations.registry().values():
        if combination.options is not None:
            combination.options.add_arguments(
                p.add_argument_group(f"Combination {combination.name}", f"{combination.about}.")
            )
    return p


def _add_llm_options(p) -> None:
    """The LLM that picks B's tags: backend, adapter, model, decoding, host and where it runs."""
    p.add_argument(
        "--llm",
        type=_llm_spec,
        default="embedded",
        help=f"tag selector backend for B: {LLM_SPECS} (default: embedded SmolLM2-135M, no server; "
        "gguf runs a local llama/Mistral or qwen2 GGUF with the same JAX code)",
    )
    p.add_argument(
        "--adapter",
        default=None,
        help="a LoRA adapter for B's LLM (embedded or gguf): a shipped name or a directory from jaxarena-tune-llm",
    )
    p.add_argument("--model", default=None, help="Ollama model (default mistral)")
    p.add_argument(
        "--decode",
        choices=DECODE_MODES,
        default=None,
        help="choice: one tag digit, with the model's probabilities; free: Table 10's 3-token generation "
        "(default: choice for the embedded model, free for Ollama)",
    )
    p.add_argument("--host", default=None, help="Ollama host (default $OLLAMA_HOST or localhost:11434)")
    p.add_argument(
        "--llm-path",
        choices=LLM_PATHS,
        default="auto",
        help="where B's LLM runs: host (io_callback, with the prompt cache), graph (inside the jitted rollout; "
        "choice decoding of an in-process model; reads no prompt cache, fills it), "
        "auto (default: graph with a cold prompt cache when the model can run there, else host)",
    )


def _split(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def run_settings(args: argparse.Namespace) -> dict:
    """The run's settings the flags give (the `ProtocolConfig` fields they name), unchecked."""
    played = tuple(c.upper() for arg in args.combinations for c in _split(arg))
    names = {f.name for f in dataclasses.fields(ProtocolConfig)} - {"options"}
    return {name: getattr(args, name) for name in names if hasattr(args, name)} | {
        "bots": _split(args.bots),
        "combinations": played,
    }


def config_from_args(args: argparse.Namespace) -> ProtocolConfig:
    """The run's `ProtocolConfig`: the run's flags, and each combination's options from its own flags
    (kept for the combinations played, and for the others where a flag asks for something)."""
    settings = run_settings(args)
    options = {}
    for name, combination in combinations.registry().items():
        if combination.options is not None:
            built = combination.options.from_args(args)
            if name in settings["combinations"] or built != combination.options():
                options[name] = built
    return ProtocolConfig(**settings, options=options)


#: A default no flag has: what a parse gives for the flags the command line left out.
_UNSET = object()


def _given(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The argument names (dests) the command line sets itself, not by default."""
    parser.set_defaults(**{dest: _UNSET for dest in vars(parser.parse_args([]))})
    return {dest for dest, value in vars(parser.parse_args(argv)).items() if value is not _UNSET}


def _option_names(options: type) -> set[str]:
    """The argument names of a combination's option flags."""
    parser = argparse.ArgumentParser(add_help=False)
    options.add_arguments(parser.add_argument_group())
    return set(vars(parser.parse_args([])))


def config_over_file(path: Path, args: argparse.Namespace, given: set[str]) -> ProtocolConfig:
    """The config in file `path`, with what the command line sets itself in its place: a run's setting
    where its flag is given, and a combination's options where one of its flags is."""
    # Nothing is checked before the merge: the flags alone may name a combination the file's settings serve.
    from_file, flags = ProtocolConfig.from_file(path), run_settings(args)
    options = dict(from_file.options)
    for name, combination in combinations.registry().items():
        if combination.options is not None and _option_names(combination.options) & given:
            options[name] = combination.options.from_args(args)
    return dataclasses.replace(from_file, **{k: v for k, v in flags.items() if k in given}, options=options)


@cli_main("jaxarena-evaluate")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_folder(args.out, "--out")  # before anything runs: a file in the way would fail the first write
    if args.run_id:
        check_folder(Path(args.out) / args.run_id, "--run-id")
    try:
        if args.config is None:
            config = config_from_args(args)
        else:
            config = config_over_file(args.config, args, _given(build_parser(), argv))
    except (ValueError, TypeError, OSError) as exc:  # a config file's bad value or type, or no such file
        build_parser().error(str(exc))
    cache = False if args.no_cache else (args.cache if args.cache else True)
    summary = evaluate(
        config,
        args.out,
        args.run_id,
        fresh=args.fresh,
        cache_path=cache,
        progress=not args.no_progress,
        figures=not args.no_figures,
        preflight=not args.no_preflight,
    )
    run_dir = Path(summary["run_dir"])
    tm = summary["timings"]
    pricing = f"pricing {tm['cells_pricing_s']:.1f} s " if "cells_pricing_s" in tm else ""
    print(f"\nresults: {run_dir}/report.md")
    for comb, per_bot in summary["descriptive"].items():
        for bot, r in per_bot.items():
            print(
                f"  {comb} {bot:<10} mean {r['mean_s']:6.2f} s  median {r['median_s']:6.2f} s  "
                f"NPC win {r['npc_win_pct']:5.1f}%  bot win {r['bot_win_pct']:5.1f}%  "
                f"timeout {r['timeout_pct']:5.1f}%"
            )
    for bot, m in summary["mann_whitney"].items():
        print(f"  A vs B {bot:<10} U {m['U']:.1f}  p {m['p']:.4g}{m['stars']}  r {m['r']:+.3f}  {m['direction']}")
    for section in combinations.sections():
        if summary.get(section.key) and section.console is not None:
            section.console(summary[section.key])
    print(
        f"  time: session {tm['session_wall_s']:.1f} s; cells: compile {tm['cells_compile_s']:.1f} s, "
        f"simulation {tm['cells_simulation_s']:.1f} s, LLM {tm['cells_llm_s']:.1f} s "
        f"{pricing}"
        f"{'(in the simulation: graph path) ' if tm.get('llm_path') == 'graph' else ''}"
        f"(computed {len(tm['computed_cells'])}, resumed {len(tm['loaded_cells'])})"
    )
    warning = fallback_warning(summary)
    if warning:
        print(f"jaxarena-evaluate: warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
