"""`jaxarena-evaluate` / `scripts/evaluate.py`: the paper's 600-episode protocol in one command.

    jaxarena-evaluate                                   # shipped policies + embedded LLM, 100 episodes/cell
    jaxarena-evaluate --episodes 1000 --seed 1
    jaxarena-evaluate --llm ollama --model mistral      # the paper's set-up (needs `ollama serve`)
    jaxarena-evaluate --llm gguf:ollama:mistral         # Ollama's Mistral GGUF run by our JAX code, no server
    jaxarena-evaluate --llm gguf:models/qwen2.gguf      # any local llama/Mistral or qwen2 GGUF
    jaxarena-evaluate --policy-a runs/a --policy-b runs/b
    jaxarena-evaluate --combinations A B F O --price-decisions   # + fixed tags, the oracle, B's regret
    jaxarena-evaluate --combinations A W                # A beside the white-box squads (docs/coder.md)
    jaxarena-evaluate --combinations A B C O            # + the RL selector (issue #12) and its ablations

Outputs go to `results/<run-id>/` (see `protocol.summary`). The default run id
is derived from the configuration, so running the same command again resumes
a killed run (finished cells are loaded, never recomputed); `--fresh`
discards stored cells first.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jaxarena.llm.backends import LLM_SPECS, parse_llm_spec
from jaxarena.llm.choice import DECODE_MODES
from jaxarena.names import BOT_TYPES
from jaxarena.scenarios import DEFAULT_SCENARIO, SCENARIOS

from .config import (
    C_ABLATIONS,
    COMBINATIONS,
    DEFAULT_COMBINATIONS,
    DEFAULT_ORACLE_ROLLOUTS,
    LLM_PATHS,
    ProtocolConfig,
    whitebox_specs,
)
from .policies import policy_env_id
from .runner import ProtocolRunner


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
) -> dict:
    """Runs (or resumes) the protocol and writes every output; returns the summary dict.

    cache_path: True (default) uses `<out>/llm_cache.jsonl`, shared by all runs
    under `out`, so a re-run is warm; a path uses that file; None/False disables it.
    """
    start = time.perf_counter()
    config = config or ProtocolConfig()
    run_id = run_id or default_run_id(config)
    run_dir = Path(out) / run_id
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cache_path is True:
        cache_path = Path(out) / "llm_cache.jsonl"
    elif cache_path is False:
        cache_path = None

    from .summary import write_outputs

    runner = ProtocolRunner(config, run_dir, cache_path=cache_path, progress=progress, after_cell=after_cell)
    try:
        cells = runner.run()
        policies = {}
        for comb in config.labels():
            if comb == "W":
                squads = {f"W:{name}": (whitebox_specs()[name], *squad) for name, squad in runner.whitebox().items()}
            elif comb in config.c_labels():
                squads = {comb: (runner.selector_cells().squad_spec(comb), *runner.policy(comb))}
            else:
                squads = {comb: (config.policy_for(comb), *runner.policy(comb))}
            for label, (spec, policy, _, checksum, source) in squads.items():
                policies[label] = {"spec": spec, "source": source, "sha256": checksum, "env_id": policy_env_id(policy)}
        llm = runner.llm_identity() if "B" in config.combinations else None
        selectors = {label: runner.selector_cells().identity(label) for label in config.c_labels()}
        if llm is not None:
            llm = {**llm, "path": runner.llm_path(), "path_reason": runner.session.get("llm_path_reason")}
    finally:
        runner.close()
    meta = {
        "run_id": run_id,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "policies": policies,
        "llm": llm,
        **({"selectors": selectors} if selectors else {}),
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


def _llm_spec(text: str) -> str:
    try:
        parse_llm_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxarena-evaluate",
        description="Run the paper's evaluation protocol (Combinations A and B x 3 bots; optionally fixed tags F, "
        "the oracle O, the white-box squads W and the RL selector C with its ablations) and write episodes.csv, "
        "decisions.jsonl, summary.json, report.md and figures.",
    )
    p.add_argument("--episodes", type=int, default=100, help="episodes per (combination, bot) cell (default 100)")
    p.add_argument("--seed", type=int, default=0, help="base seed; A and B share it (paired design)")
    p.add_argument("--bots", default=",".join(BOT_TYPES), help="comma-separated bot types (default: all three)")
    p.add_argument(
        "--combinations",
        nargs="+",
        default=list(DEFAULT_COMBINATIONS),
        metavar="C",
        help=f"combinations to run, from {' '.join(COMBINATIONS)} (space- or comma-separated; default A B). "
        "F: B's policy with each tag held all episode; O: the oracle picks each tag (slow: minutes per bot); "
        "W: the white-box baselines of docs/coder.md (rush, kite, surround_strike) on A's paired episodes; "
        "C: the RL selector among the LLM's candidate tags (issue #12), with its ablations (--c-ablations)",
    )
    p.add_argument(
        "--oracle-rollouts",
        type=int,
        default=DEFAULT_ORACLE_ROLLOUTS,
        metavar="K",
        help=f"the oracle's playouts per tag, for O and --price-decisions (default {DEFAULT_ORACLE_ROLLOUTS})",
    )
    p.add_argument(
        "--price-decisions",
        action="store_true",
        help="price every B decision with the oracle (K playouts per tag): regret and agreement per bot (slow)",
    )
    p.add_argument(
        "--scenario",
        choices=tuple(SCENARIOS),
        default=DEFAULT_SCENARIO,
        help=f"arena preset for every cell (jaxarena.scenarios; default {DEFAULT_SCENARIO})",
    )
    p.add_argument(
        "--selector",
        default="C",
        metavar="NAME_OR_DIR",
        help="Combination C's trained selector: a shipped name (default C) or a jaxarena-train-selector run "
        "directory; it names its squad policy and strategy table",
    )
    p.add_argument(
        "--c-ablations",
        default="all",
        metavar="LIST",
        help=f"C's ablations, each played beside C: all (default), none, or a comma list of {','.join(C_ABLATIONS)}",
    )
    p.add_argument(
        "--selector-nodeduction",
        default="C-nodeduction",
        metavar="NAME_OR_DIR",
        help="the selector of the C-nodeduction ablation (trained with --deduction false)",
    )
    p.add_argument(
        "--selector-scripted",
        default="C-scripted",
        metavar="NAME_OR_DIR",
        help="the selector of the C-scripted ablation (trained with --population scripted)",
    )
    p.add_argument(
        "--price-c",
        action="store_true",
        help="price every C decision with the oracle (K playouts per tag): C's regret per bot (slow, as "
        "--price-decisions)",
    )
    p.add_argument("--policy-a", default="A", help="Combination A policy: run dir, exported policy, or 'A' (shipped)")
    p.add_argument(
        "--policy-b",
        default="B",
        help="Combination B policy: run dir, exported policy, or a shipped name ('B'; 'B-paper': the paper recipe's B)",
    )
    p.add_argument("--greedy", action="store_true", help="take the most likely action instead of sampling")
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
    p.add_argument("--latency-steps", type=int, default=0, help="ticks before a chosen tag takes effect (default 0)")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples for win-rate CIs")
    p.add_argument("--out", default="results", help="output root (default results/)")
    p.add_argument("--run-id", default=None, help="results/<run-id>; default derived from the configuration")
    p.add_argument("--fresh", action="store_true", help="discard stored cells of this run id first")
    p.add_argument("--cache", default=None, help="LLM prompt cache file (default <out>/llm_cache.jsonl)")
    p.add_argument("--no-cache", action="store_true", help="no prompt cache: every prompt goes to the LLM")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    return p


def config_from_args(args: argparse.Namespace) -> ProtocolConfig:
    def split(s: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in s.split(",") if x.strip())

    ablations = args.c_ablations.strip().lower()
    c_ablations = (
        C_ABLATIONS
        if ablations == "all"
        else ()
        if ablations == "none"
        else tuple(next((a for a in C_ABLATIONS if a.lower() == x.lower()), x) for x in split(args.c_ablations))
    )
    return ProtocolConfig(
        episodes=args.episodes,
        seed=args.seed,
        bots=split(args.bots),
        combinations=tuple(c.upper() for arg in args.combinations for c in split(arg)),
        policy_a=args.policy_a,
        policy_b=args.policy_b,
        greedy=args.greedy,
        llm=args.llm,
        adapter=args.adapter,
        model=args.model,
        host=args.host,
        decode=args.decode,
        latency_steps=args.latency_steps,
        llm_path=args.llm_path,
        n_boot=args.n_boot,
        scenario=args.scenario,
        oracle_rollouts=args.oracle_rollouts,
        price_decisions=args.price_decisions,
        selector=args.selector,
        selector_nodeduction=args.selector_nodeduction,
        selector_scripted=args.selector_scripted,
        c_ablations=c_ablations,
        price_c=args.price_c,
    )


def print_oracle(oracle: dict) -> None:
    """The headroom table in a few lines: squad win % (95% CI) of A, B, the best fixed tag and O."""

    def rate(entry):
        return f"{entry['win_pct']:5.1f}% ({entry['ci95'][0]:.0f}-{entry['ci95'][1]:.0f})" if entry else "    —"

    print(f"  oracle (scenario {oracle['scenario']}, K={oracle['rollouts']}): squad win % (95% CI)")
    for bot, r in oracle["by_bot"].items():
        best = r.get("best_fixed")
        parts = [f"A {rate(r.get('A'))}", f"B {rate(r.get('B'))}"]
        if best:
            parts.append(f"best F ({best['name']}) {rate(best)}")
        parts.append(f"O {rate(r.get('O'))}")
        if r.get("headroom"):
            h = r["headroom"]
            parts.append(f"headroom {h['pct_points']:+.1f} pp ({h['ci95'][0]:+.1f}, {h['ci95'][1]:+.1f})")
        if r.get("llm"):
            m = r["llm"]
            parts.append(
                f"LLM regret {m['mean_regret']:.3f} ({m['regret_ci95'][0]:.3f}-{m['regret_ci95'][1]:.3f}), "
                f"agrees {m['agreement_pct']:.0f}% of {m['decisions']}"
            )
        print(f"    {bot:<10} " + "  ".join(parts))


def print_whitebox(whitebox: dict) -> None:
    """Each white-box squad's win % (95% CI) and its paired difference from A."""
    print("  white-box squads: squad win % (95% CI), minus A's in pp (paired 95% CI)")
    for bot, r in whitebox["by_bot"].items():
        parts = [f"A {r['A']['win_pct']:5.1f}%"] if "A" in r else []
        for name, e in r["squads"].items():
            part = f"{name} {e['win_pct']:5.1f}% ({e['ci95'][0]:.0f}-{e['ci95'][1]:.0f})"
            if "vs_A" in e:
                v = e["vs_A"]
                part += f" {v['win_pct_points']:+.1f} ({v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f})"
            parts.append(part)
        print(f"    {bot:<10} " + "  ".join(parts))


def print_selector(section: dict) -> None:
    """C and its ablations, one line each: squad win % (95% CI), against B (paired difference in pp
    and the Mann-Whitney p of time-to-defeat), and the entropy of the tags chosen."""
    print(f"  Combination C (scenario {section['scenario']}): squad win % (95% CI); vs B: pp (paired CI), MWU p")
    for bot, rows in section["by_bot"].items():
        for label, r in rows.items():
            line = f"    {bot:<10} {label:<13} {r['win_pct']:5.1f}% ({r['ci95'][0]:3.0f}-{r['ci95'][1]:3.0f})"
            if "vs_B" in r:
                v = r["vs_B"]
                mw = v["mann_whitney"]
                line += (
                    f"  vs B {v['win_pct_points']:+6.1f} pp ({v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f})"
                    f"  MWU p {mw['p']:.3g}{mw['stars']} ({mw['direction']})"
                )
            if "tags" in r and r["tags"]["total"]:
                line += f"  tag entropy {r['tags']['entropy_bits']:.2f} bits"
            print(line)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
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
    if summary.get("oracle"):
        print_oracle(summary["oracle"])
    if summary.get("whitebox"):
        print_whitebox(summary["whitebox"])
    if summary.get("selector"):
        print_selector(summary["selector"])
    print(
        f"  time: session {tm['session_wall_s']:.1f} s; cells: compile {tm['cells_compile_s']:.1f} s, "
        f"simulation {tm['cells_simulation_s']:.1f} s, LLM {tm['cells_llm_s']:.1f} s "
        f"{pricing}"
        f"{'(in the simulation: graph path) ' if tm.get('llm_path') == 'graph' else ''}"
        f"(computed {len(tm['computed_cells'])}, resumed {len(tm['loaded_cells'])})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
