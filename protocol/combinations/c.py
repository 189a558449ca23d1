"""Combination C: the RL selector choosing among the LLM's candidate tags, and its ablations.

Each label ("C", "C-N1", ...; `protocol.selector_cells.VARIANTS`) is a cell
of its own per bot, played by its selector's squad policy with the selector
(or an ablation's chooser) as the tag source, inside the rollout. What each
label plays, its fingerprint and its decision records are
`protocol.selector_cells`'; its numbers, report section and figures are
`selector_summary`, `selector_tables` and `selector_figures`'.
"""

from __future__ import annotations

from ..combination import Combination, Played, ReportSection
from ..config import C_ABLATIONS
from ..playing import arena, compile_rollout, episodes, period_s, timed_call
from ..pricing import price_cell
from ..selector_cells import SelectorCells, records
from ..selector_figures import selector_figures
from ..selector_tables import print_selector, selector_tables


def selector_cells(context) -> SelectorCells:
    """The run's selectors, tables and variants (loaded once per run)."""
    return context.shared("C.selectors", lambda: SelectorCells(context.config, context.session))


def _labels(config) -> list[str]:
    return ["C", *(f"C-{a}" for a in config.c_ablations)]


def _play(context, label: str, bot: str, key, progress) -> Played:
    c, cells = context.config, selector_cells(context)
    policy, params = context.resolve(cells.squad_spec(label))[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    # The table and the network are constants of the program (a few hundred kB).
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(
            context, env, env_params, policy, params, cells.tag_source(label), record_states=cells.priced(label)
        ),
    )
    result, wall = timed_call(program, params, env_params, key)
    # The selector and the LLM's table ran inside the rollout.
    decisions, timing = records(label, bot, result, period_s(env_params)), {}
    if cells.priced(label):
        decisions, timing["pricing"] = price_cell(
            context, result, decisions, env, env_params, policy, params, key, progress
        )
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall, decisions, timing=timing)


def _check(config) -> None:
    for a in config.c_ablations:
        if a not in C_ABLATIONS:
            raise ValueError(f"unknown C ablation {a!r}; choose from {', '.join(C_ABLATIONS)}")
    if len(set(config.c_ablations)) != len(config.c_ablations):
        raise ValueError(f"C ablations repeat: {config.c_ablations}")
    if config.price_c and "C" not in config.combinations:
        raise ValueError("price_c prices Combination C's decisions: add C to the combinations")


def _meta(context, config) -> dict:
    labels = config.c_labels()
    return {"selectors": {label: selector_cells(context).identity(label) for label in labels}} if labels else {}


def _summarize(results) -> dict:
    from ..selector_summary import selector_summary  # jax and scipy: loaded when a summary is made

    return selector_summary(results.by, results.descriptive, results.config, results.meta.get("selectors"))


#: C and its ablations against B: outcomes, tags and their bias, deduction, regret.
SELECTOR = ReportSection(
    key="selector",
    rank=30,
    applies=lambda config: "C" in config.combinations,
    summarize=_summarize,
    render=selector_tables,
    figures=selector_figures,
    console=print_selector,
)

COMBINATION = Combination(
    name="C",
    about="the RL selector among the LLM's candidate tags, with its ablations (--c-ablations)",
    squads=lambda context, label: {label: selector_cells(context).squad_spec(label)},
    play=_play,
    fingerprint=lambda context, label: selector_cells(context).fingerprint(label),
    labels=_labels,
    check=_check,
    meta=_meta,
    identity_fields=("selector", "selector_nodeduction", "selector_scripted", "c_ablations"),
    sections=(SELECTOR,),
)
