"""Combination L: B's squad under the tuned LLM, the same model as B's with a LoRA adapter.

The adapter (its option, `--tuned-adapter`: a shipped name or a directory
from `jaxarena-tune-llm train`) runs inside the jitted rollout on the same
in-graph path as B's LLM (`GraphTagSource`), so L needs an in-process model
with choice decoding (`--llm embedded` or `gguf:PATH`). B's own LLM stays as
`--llm`/`--adapter` say (the stock model by default), so with both in a run
L against B is the tuned model against the stock one, on the same paired
episodes. Its section gives each bot's win % (95% CI), the paired difference
from B, a Mann-Whitney U test of the two combinations' durations, and the tags
L chose.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxarena.names import NPC_WIN, TAG_NAMES

from ..combination import Combination, Played, ReportSection, Results
from ..playing import arena, compile_rollout, episodes, timed_call
from .b import prompt_limits


@dataclasses.dataclass(frozen=True)
class LOptions:
    """adapter: the LoRA adapter of L's LLM: a shipped name or a directory from `jaxarena-tune-llm train`;
    L needs one."""

    adapter: str | None = None

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--tuned-adapter",
            default=None,
            metavar="NAME_OR_DIR",
            help="L's adapter, on B's LLM in place of --adapter: a shipped name or a directory from "
            "jaxarena-tune-llm train",
        )

    @classmethod
    def from_args(cls, args) -> LOptions:
        return cls(adapter=args.tuned_adapter)


def llm_run(context):
    """L's LLM: the run's LLM settings with the tuned adapter, made once per run."""

    def make():
        from jaxarena.llm.paths import LLMRun

        adapter = context.config.options_of("L").adapter
        settings = dataclasses.replace(context.config, adapter=adapter, llm_path="graph")
        return LLMRun(settings, None, lambda: prompt_limits(context.config), context.session, player="L")

    return context.shared("L.llm", make)


def _play(context, label: str, bot: str, key, progress) -> Played:
    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    graph = llm_run(context).graph_source()
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(
            context, env, env_params, policy, params, graph.tag_fn(), tag_state=graph.initial_state()
        ),
    )
    result, wall = timed_call(program, params, env_params, key)
    decisions = graph.records.decision_records(result, {"combination": label, "bot": bot})
    return Played(
        {"episodes": episodes(result, key, c.episodes)},
        compile_s,
        wall,
        decisions,
        graph.records.counters(result),
        {"llm_path": "graph"},
    )


def _fingerprint(context, label: str) -> dict:
    return {"llm": {k: v for k, v in llm_run(context).identity().items() if k != "host"}, "llm_path": "graph"}


def _check(config) -> None:
    if "L" in config.combinations and not config.options_of("L").adapter:
        raise ValueError(
            "Combination L plays B's squad under a tuned LLM: name its adapter with --tuned-adapter "
            "(a shipped name or a directory from jaxarena-tune-llm train)"
        )


def _identity(config) -> dict:
    # Only where L plays, under the flat name it had before options were grouped: an older command
    # keeps its run id.
    return {"tuned_adapter": config.options_of("L").adapter} if "L" in config.combinations else {}


def _meta(context, config) -> dict:
    return {"llm_L": llm_run(context).identity()} if "L" in config.combinations else {}


def versus_b(results: Results, label: str, adapter: str | None) -> dict:
    """Per bot: `label`'s win % (95% CI), its tag shares, and with B in the run the paired difference and MWU."""
    from .. import stats  # scipy: loaded when a summary is made, not when the registry is read

    c = results.config
    by_bot = {}
    for bot in c.bots:
        cell = results.by.get(label, {}).get(bot)
        if cell is None:
            continue
        row = results.descriptive[label][bot]
        steps = np.asarray(cell["episodes"]["tag_steps"]).sum(axis=0)
        entry = {
            "win_pct": row["npc_win_pct"],
            "ci95": list(row["ci95"]["npc_win"]),
            "n": row["n"],
            "tag_share": (steps / max(steps.sum(), 1)).tolist(),
        }
        b_cell = results.by.get("B", {}).get(bot)
        if b_cell is not None:
            won, b_won = (np.asarray(x["episodes"]["outcome"]) == NPC_WIN for x in (cell, b_cell))
            diff, lo, hi = stats.paired_bootstrap_diff(won, b_won, n_boot=c.n_boot, seed=c.seed)
            mwu = stats.mann_whitney(b_cell["episodes"]["duration_s"], cell["episodes"]["duration_s"])
            entry["vs_B"] = {"win_pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi], "mwu_p": mwu["p"]}
        by_bot[bot] = entry
    return {
        "adapter": adapter,
        "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI; vs_B: minus B's on the same paired "
        "episodes, in percentage points, 95% CI from a paired bootstrap, and the Mann-Whitney U p of the durations",
        "tag_share": "share of the episodes' ticks under each tag (" + ", ".join(TAG_NAMES) + ")",
        "by_bot": by_bot,
    }


def _summarize(results: Results) -> dict:
    return versus_b(results, "L", results.config.options_of("L").adapter)


def render_versus_b(section: dict, heading: str) -> list[str]:
    """The markdown of a `versus_b` section under `heading`."""
    lines = [
        heading,
        "",
        "| Bot | NPC Win % (95% CI) | Win − B (pp, 95% CI) | MWU p (durations) | Ticks per tag (S / A / F / R) |",
        "|---|---:|---:|---:|---|",
    ]
    for bot, r in section["by_bot"].items():
        vs = r.get("vs_B")
        shares = " / ".join(f"{s:.2f}" for s in r["tag_share"])
        lines.append(
            f"| {bot.capitalize()} | {r['win_pct']:.1f}% ({r['ci95'][0]:.1f}–{r['ci95'][1]:.1f}) | "
            + (
                f"{vs['win_pct_points']:+.1f} ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f}) | {vs['mwu_p']:.3g}"
                if vs
                else "— | —"
            )
            + f" | {shares} |"
        )
    return lines + [""]


def print_versus_b(section: dict, title: str, label: str) -> None:
    """The console lines of a `versus_b` section."""
    print(f"  {title}: squad win % (95% CI), minus B's in pp")
    for bot, r in section["by_bot"].items():
        vs = r.get("vs_B")
        print(
            f"    {bot:<10} {label} {r['win_pct']:5.1f}% ({r['ci95'][0]:.0f}-{r['ci95'][1]:.0f})"
            + (f"  {vs['win_pct_points']:+.1f} vs B ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f})" if vs else "")
        )


def _render(section: dict) -> list[str]:
    return render_versus_b(section, f"### Tuned LLM (L): B's squad under the LLM with adapter `{section['adapter']}`")


def _console(section: dict) -> None:
    print_versus_b(section, f"tuned LLM L ({section['adapter']})", "L")


COMBINATION = Combination(
    name="L",
    about="B's squad under the tuned LLM (B's model with the LoRA adapter --tuned-adapter)",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=_fingerprint,
    check=_check,
    meta=_meta,
    preflight=lambda context: llm_run(context).preflight(),
    options=LOptions,
    identity=_identity,
    sections=(
        ReportSection(
            key="tuned_llm",
            rank=35,
            applies=lambda config: "L" in config.combinations,
            summarize=_summarize,
            render=_render,
            console=_console,
        ),
    ),
)
