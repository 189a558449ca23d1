"""Combination B: B's policy with the LLM choosing the tag every 5 s, the paper's Combination B.

The LLM runs on the host (`TagSelector` through `io_callback`, with the
prompt cache) or inside the jitted rollout (`GraphTagSource`; it reads no
prompt cache but fills it), as `jaxarena.llm.paths` decides; both write the
same decision records and counters. With `price_decisions` (`BOptions`) the
rollout also records its decision states and the oracle prices every decision
(`protocol.pricing`), which the headroom section reads. The LLM's settings are
the run's (`ProtocolConfig.llm`, ...): L plays the same model.
"""

from __future__ import annotations

import dataclasses

from ..combination import Combination, Played
from ..playing import arena, compile_rollout, episodes, timed_call
from ..pricing import price_cell
from . import o


@dataclasses.dataclass(frozen=True)
class BOptions:
    """latency_steps: ticks between a decision and its tag taking effect (0 = at once).
    price_decisions: price every decision with the oracle (regret, agreement; `oracle_rollouts`
      playouts per tag).
    """

    latency_steps: int = 0
    price_decisions: bool = False

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--latency-steps",
            type=int,
            default=cls.latency_steps,
            metavar="N",
            help="ticks before a chosen tag takes effect (default 0)",
        )
        group.add_argument(
            "--price-decisions",
            action="store_true",
            help="price every B decision with the oracle (K playouts per tag): regret and agreement per bot (slow)",
        )

    @classmethod
    def from_args(cls, args) -> BOptions:
        return cls(latency_steps=args.latency_steps, price_decisions=args.price_decisions)


def prompt_limits(config) -> dict[str, float]:
    """The HP maxima the prompt prints ("Enemy bot HP: 245/300"): the scenario's, not the paper's."""
    import jaxarena

    params = jaxarena.make("Arena-v0", scenario=config.scenario)[1]
    return {"bot_max_hp": float(params.bot_hp), "npc_max_hp": float(params.npc_hp)}


def llm_run(context):
    """The run's LLM (`jaxarena.llm.paths.LLMRun`): backend, path, selector and graph source, made once."""
    return context.shared("B.llm", lambda: _make_llm_run(context))


def _make_llm_run(context):
    from jaxarena.llm.paths import LLMRun

    def stored_path() -> str | None:
        for bot in context.config.bots:
            fp = context.stored_fingerprint("B", bot)
            if fp is not None:
                return fp.get("llm_path", "host")  # host cells keep the fingerprint they always had
        return None

    run = LLMRun(
        context.config,
        context.cache_path,
        lambda: prompt_limits(context.config),
        context.session,
        stored_path=stored_path,
        needed="B" in context.config.combinations,
    )
    context.add_status(run.status)
    return run


def _stats_delta(after: dict, before: dict) -> dict:
    out = {}
    for k, v in after.items():
        if isinstance(v, dict):
            out[k] = {kk: v[kk] - before.get(k, {}).get(kk, 0) for kk in v}
        elif isinstance(v, list):
            b = before.get(k, [0] * len(v))
            out[k] = [x - y for x, y in zip(v, b, strict=True)]
        else:
            out[k] = v - before.get(k, 0)
    return out


def _fingerprint(context, label: str) -> dict:
    c, llm, options = context.config, llm_run(context), context.config.options_of("B")
    fp = {"llm": {k: v for k, v in llm.identity().items() if k != "host"}, "latency_steps": options.latency_steps}
    if llm.path() == "graph":  # host cells keep the fingerprint they always had
        fp["llm_path"] = "graph"
    if options.price_decisions:
        fp["pricing"] = {"rollouts": c.oracle_rollouts}
    return fp


def _compile(context, label, env, env_params, policy, params, source, tag_state=None):
    options = context.config.options_of("B")
    # Only a run that prices its decisions keeps the states: the default program is unchanged.
    return context.program(
        label,
        lambda: compile_rollout(
            context,
            env,
            env_params,
            policy,
            params,
            source,
            latency_steps=options.latency_steps,
            record_states=options.price_decisions,
            tag_state=tag_state,
        ),
    )


def _play_on_host(context, label, bot, key, progress, env, env_params, policy, params) -> tuple:
    """The rollout calls the run's `TagSelector` once per period; the compiled program keeps the
    selector it was traced with, so what changes per cell is its context and counters."""
    selector = llm_run(context).selector()
    selector.context = {"combination": label, "bot": bot}
    before, n_records = selector.stats.as_dict(), len(selector.records)
    program, compile_s = _compile(context, label, env, env_params, policy, params, selector.jax_fn())
    # The bar counts the batch's finished episodes, which each LLM call reports.
    selector.on_call = lambda stats, done: progress(done)
    try:
        result, wall = timed_call(program, params, env_params, key)
    finally:
        selector.on_call = None
    delta = _stats_delta(selector.stats.as_dict(), before)
    # `call` counts the selector's calls over the whole session; make it count from
    # the cell's start, so a resumed run logs exactly what an uninterrupted one does.
    decisions = [{**d, "call": d["call"] - before["calls"]} for d in selector.records[n_records:]]
    timing = {"llm_s": delta["host_seconds"], "simulation_s": max(0.0, wall - delta["host_seconds"])}
    return result, Played({}, compile_s, wall, decisions, delta, timing)


def _play_in_graph(context, label, bot, key, progress, env, env_params, policy, params) -> tuple:
    """The LLM runs inside the rollout: its time is part of the simulation's; its weights are an
    argument of the program (part of the tag source's carry), not constants."""
    graph = llm_run(context).graph_source()
    program, compile_s = _compile(
        context, label, env, env_params, policy, params, graph.tag_fn(), tag_state=graph.initial_state()
    )
    result, wall = timed_call(program, params, env_params, key)
    decisions = graph.records.decision_records(result, {"combination": label, "bot": bot})
    if context.cache_path is not None:  # so that a later host-path run is warm
        from jaxarena.llm.cache import PromptCache

        PromptCache(context.cache_path).put_many(graph.records.cache_entries(result))
    return result, Played({}, compile_s, wall, decisions, graph.records.counters(result), {"llm_path": "graph"})


def _play(context, label: str, bot: str, key, progress) -> Played:
    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    play = _play_in_graph if llm_run(context).path() == "graph" else _play_on_host
    result, played = play(context, label, bot, key, progress, env, env_params, policy, params)
    decisions, timing = played.decisions, dict(played.timing)
    if c.options_of("B").price_decisions:
        decisions, timing["pricing"] = price_cell(
            context, result, decisions, env, env_params, policy, params, key, progress
        )
    return dataclasses.replace(
        played, episodes={"episodes": episodes(result, key, c.episodes)}, decisions=decisions, timing=timing
    )


def _check(config) -> None:
    if config.options_of("B").price_decisions and "B" not in config.combinations:
        raise ValueError(
            "B's price_decisions option (--price-decisions) prices Combination B's LLM decisions: add B to the "
            "combinations"
        )


def _identity(config) -> dict:
    # The flat names these had before options were grouped (pricing only where on): an older
    # command keeps its run id.
    options = config.options_of("B")
    return {"latency_steps": options.latency_steps, **({"price_decisions": True} if options.price_decisions else {})}


def _meta(context, config) -> dict:
    if "B" not in config.combinations:
        return {}
    llm = llm_run(context)
    return {"llm": {**llm.identity(), "path": llm.path(), "path_reason": context.session.get("llm_path_reason")}}


COMBINATION = Combination(
    name="B",
    about="B's policy with the LLM choosing the tag every 5 s, the paper's Combination B",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=_fingerprint,
    check=_check,
    meta=_meta,
    preflight=lambda context: llm_run(context).preflight(),
    options=BOptions,
    identity=_identity,
    sections=(o.HEADROOM,),  # with price_decisions: B's regret against the oracle
)
