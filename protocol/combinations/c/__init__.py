"""Combination C: the RL selector choosing among the LLM's candidate tags, and its ablations.

Each label ("C", "C-N1", ...; `cells.VARIANTS`) is a cell of its own per bot,
played by its selector's squad policy with the selector (or an ablation's
chooser) as the tag source, inside the rollout. Its options (`COptions`, in
`options` with the labels they give) name the selectors and the ablations to
play. What each label plays, its fingerprint and its decision records are
`cells`'; its numbers, report section and figures are `summary`, `tables` and
`figures`'.
"""

from __future__ import annotations

from ...combination import Combination, Played, ReportSection
from ...playing import arena, compile_rollout, episodes, period_s, timed_call
from ...pricing import price_cell
from .cells import SelectorCells, records
from .figures import selector_figures
from .options import C_ABLATIONS, COptions, labels, played_labels
from .tables import print_selector, selector_tables


def selector_cells(context) -> SelectorCells:
    """The run's selectors, tables and variants (loaded once per run)."""
    c = context.config
    return context.shared("C.selectors", lambda: SelectorCells(c.options_of("C"), c.oracle_rollouts, context.session))


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
    if config.options_of("C").price and "C" not in config.combinations:
        raise ValueError("C's price option (--price-c) prices Combination C's decisions: add C to the combinations")


def _identity(config) -> dict:
    # Only where C plays, under the flat names these had before options were grouped (pricing only
    # where on): an older command keeps its run id.
    if "C" not in config.combinations:
        return {}
    options = config.options_of("C")
    return {
        "selector": options.selector,
        "selector_nodeduction": options.selector_nodeduction,
        "selector_scripted": options.selector_scripted,
        "c_ablations": list(options.ablations),
        **({"price_c": True} if options.price else {}),
    }


def _meta(context, config) -> dict:
    labels = played_labels(config)
    return {"selectors": {label: selector_cells(context).identity(label) for label in labels}} if labels else {}


def _summarize(results) -> dict:
    from .summary import selector_summary  # jax and scipy: loaded when a summary is made

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
    labels=labels,
    check=_check,
    meta=_meta,
    options=COptions,
    identity=_identity,
    sections=(SELECTOR,),
)

__all__ = ["C_ABLATIONS", "COMBINATION", "COptions", "played_labels", "selector_cells"]
