"""Running the protocol's cells: (combination, bot) batches of seeded episodes.

A *cell* (`config`) is one combination (A, B, F, O or W) against one bot type:
`episodes` episodes run as one vmapped batch under one jitted
`jaxarena.runner.make_runner` program (outer scan over 5 s decision periods,
inner scan over 50 steps). Every combination goes through that same code path
and differs only in

- the policy (A's checkpoint for A, B's for B, F and O; for W each white-box
  baseline in turn, one program per squad; `policies`), and
- the tag source: a fixed tag 0 for A and W; each tag held in turn for F (four
  batches, one program); the oracle's argmax for O
  (`jaxarena.oracle.oracle_tag_source`); for B the LLM, on one of two paths
  (`ProtocolRunner.llm_path`): "host", the `TagSelector` called once per
  decision period for the whole batch through `io_callback` (with the prompt
  cache), or "graph", `jaxarena.llm.graph_tags.GraphTagSource` inside the
  jitted rollout (no callback; it reads no prompt cache but fills it; the
  embedded model's choice decoding only). Both write the same decision records. With
  `price_decisions` the B rollout also records its decision states, and
  `pricing.DecisionPricer` adds the oracle's verdict to every decision record.
  C and its ablations ("C-N1", ...) are played by `selector_cells` (the
  selector's squad, the RL selector or an ablation's chooser as the tag
  source, in the graph); with `price_c` C's decisions are priced as B's.

Paired design: a cell's key depends only on (seed, bot), so every combination
meets the same spawns, the same balanced-bot schedules and the same
policy-sampling keys episode for episode (the runner derives episode i's keys
from (key, i)).

Resume: each finished cell is written atomically to `cells/<comb>_<bot>.json`
(episodes, that cell's LLM decisions, counters and timings) together with a
fingerprint of everything that determines its results. A re-run loads the
cells whose fingerprint matches and computes only the missing ones; a cell is
either complete on disk or absent, never half written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxarena.files import write_atomic
from jaxarena.names import NUM_TAGS
from jaxarena.scenarios import DEFAULT_SCENARIO

from . import selector_cells
from .config import CELL_FORMAT, ProtocolConfig, cell_key_data, cell_name, is_selector_label, whitebox_specs
from .policies import DEFAULT_ENV_ID, policy_env_id, policy_shaping, resolve_policy
from .pricing import PRICING_STREAM, DecisionPricer, active_states, annotate


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


class ProtocolRunner:
    """Runs (or resumes) the cells of one protocol run into `run_dir/cells/`.

    Args:
      config: the run's `ProtocolConfig`.
      run_dir: `results/<run-id>`.
      cache_path: the LLM prompt cache (JSONL, shared across runs so a re-run
        is warm); None disables caching.
      progress: show a tqdm bar (cells, episodes, LLM calls, cache hits, fallbacks, ETA).
      after_cell: called as `after_cell(name, cell)` once a cell is on disk
        (tests use it to simulate a kill between cells).
      backend: an LLM backend object to use instead of building one from config.
    """

    def __init__(
        self,
        config: ProtocolConfig,
        run_dir: str | os.PathLike,
        *,
        cache_path: str | os.PathLike | None = None,
        progress: bool = True,
        after_cell: Callable[[str, dict], None] | None = None,
        backend: Any = None,
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.cells_dir = self.run_dir / "cells"
        self.cache_path = cache_path
        self.progress = progress
        self.after_cell = after_cell
        self._backend = backend
        self._policies: dict[str, tuple] = {}
        self._compiled: dict[str, Any] = {}
        self._selector = None
        self._graph = None
        self._pricers: dict[Any, DecisionPricer] = {}  # by squad policy: B's and C's may differ
        self._c: selector_cells.SelectorCells | None = None
        self._period_hook: Callable[[float, int], None] | None = None  # O's progress: (time_s, ended episodes)
        self._extra_post: dict[str, str] = {}
        self._llm_path: tuple[str, str] | None = None
        self.session: dict[str, float] = {"policy_load_s": 0.0, "llm_load_s": 0.0}
        self.computed: list[str] = []  # cells computed (not loaded) in this session

    # -- identity --
    def policy(self, combination: str):
        if is_selector_label(combination):  # C and its ablations play their selector's squad
            return self.resolve(self.selector_cells().squad_spec(combination))
        return self.resolve(self.config.policy_for(combination))

    def selector_cells(self) -> selector_cells.SelectorCells:
        """Combination C's selectors, tables and programs (`protocol.selector_cells`)."""
        if self._c is None:
            self._c = selector_cells.SelectorCells(self.config, self.session)
        return self._c

    def whitebox(self) -> dict[str, tuple]:
        """Combination W's squads: baseline name -> (policy, params, checksum, source)."""
        return {name: self.resolve(spec) for name, spec in whitebox_specs().items()}

    def resolve(self, spec: str):
        """`resolve_policy(spec)`, once per session."""
        if spec not in self._policies:
            t = time.perf_counter()
            self._policies[spec] = resolve_policy(spec, greedy=self.config.greedy)
            self.session["policy_load_s"] += time.perf_counter() - t
        return self._policies[spec]

    def llm_identity(self) -> dict:
        backend = self.backend()
        return {
            "backend": backend.name,
            "model": backend.model,
            "options": dict(backend.options),
            "decode": getattr(backend, "decode", "free"),
            **({"host": backend.host} if getattr(backend, "host", None) else {}),
        }

    def backend(self):
        if self._backend is None:
            from jaxarena.llm.backends import make_backend, parse_llm_spec

            name, kwargs = parse_llm_spec(self.config.llm)
            if name == "ollama":
                kwargs = {"model": self.config.model or "mistral", "host": self.config.host}
            if self.config.decode is not None:
                kwargs["decode"] = self.config.decode
            if self.config.adapter is not None:
                if name == "ollama":
                    raise ValueError(
                        "--adapter runs a LoRA adapter in our own forward pass: use --llm embedded or gguf:"
                    )
                kwargs["adapter"] = self.config.adapter
            self._backend = make_backend(name, **kwargs)
        return self._backend

    def fingerprint(self, combination: str) -> dict:
        """Everything a cell's results depend on; a stored cell is reused only if this matches."""
        c = self.config
        if combination == "W":  # every squad's checksum: editing a baseline invalidates the cell
            policy = {name: squad[2] for name, squad in self.whitebox().items()}
        else:
            policy = self.policy(combination)[2]
        fp = {
            "format": CELL_FORMAT,
            "episodes": c.episodes,
            "seed": c.seed,
            "policy": policy,
            "greedy": c.greedy,
            "num_periods": c.num_periods,
        }
        if combination in ("A", "W"):
            fp["tag"] = c.tag_a
        elif combination == "B":
            fp["llm"] = {k: v for k, v in self.llm_identity().items() if k != "host"}
            fp["latency_steps"] = c.latency_steps
            if self.llm_path() == "graph":  # host cells keep the fingerprint they always had
                fp["llm_path"] = "graph"
            if c.price_decisions:
                fp["pricing"] = {"rollouts": c.oracle_rollouts}
        elif combination == "F":
            fp["tags"] = list(range(NUM_TAGS))
        elif is_selector_label(combination):
            fp.update(self.selector_cells().fingerprint(combination))
        else:
            fp["oracle"] = {"rollouts": c.oracle_rollouts}
        # Only where it is not the paper's arena: cells stored before scenarios existed still resume.
        if c.scenario != DEFAULT_SCENARIO:
            fp["scenario"] = c.scenario
        return fp

    # -- cells on disk --
    def cell_path(self, combination: str, bot: str) -> Path:
        return self.cells_dir / f"{cell_name(combination, bot)}.json"

    def load_cell(self, combination: str, bot: str) -> dict | None:
        """The stored cell, or None; raises if it belongs to a different configuration."""
        path = self.cell_path(combination, bot)
        if not path.exists():
            return None
        cell = json.loads(path.read_text(encoding="utf-8"))
        stored_format = (cell.get("fingerprint") or {}).get("format")
        if stored_format != CELL_FORMAT:
            raise RuntimeError(
                f"{path} was written by another jaxarena release (cell format {stored_format}, this one writes "
                f"{CELL_FORMAT}); use --fresh to recompute the run, or another --run-id"
            )
        if cell.get("fingerprint") != self.fingerprint(combination):
            raise RuntimeError(
                f"{path} was produced by a different configuration "
                f"({cell.get('fingerprint')} != {self.fingerprint(combination)}); "
                "use another --run-id, or --fresh to discard it"
            )
        return cell

    # -- the LLM path --
    def llm_path(self) -> str:
        """ "host" or "graph": how B's LLM runs in this session (resolved once; see `llm_path_reason`)."""
        if self._llm_path is None:
            self._llm_path = self._resolve_llm_path()
            self.session["llm_path"], self.session["llm_path_reason"] = self._llm_path
        return self._llm_path[0]

    def _resolve_llm_path(self) -> tuple[str, str]:
        from jaxarena.llm.graph_tags import UnsupportedTokenizer

        asked = self.config.llm_path
        if asked == "host" or "B" not in self.config.combinations:
            return "host", "asked for" if asked == "host" else "no Combination B"
        backend = self.backend()
        decode = getattr(backend, "decode", "free")
        if decode != "choice" or not hasattr(backend, "load"):
            why = f"the graph path runs an in-process model's choice decoding, not {backend.name} with {decode}"
            if asked == "graph":
                raise ValueError(f"--llm-path graph: {why}; use --llm-path host")
            return "host", why
        stored = self._stored_b_path()
        if asked == "auto" and stored is not None:
            return stored, "the run's stored B cells used it (resumed)"
        if asked == "auto" and self._cache_is_warm(backend):
            return "host", "the prompt cache already holds this model's replies (a warm re-run is faster on the host)"
        try:
            self.graph_source()
        except UnsupportedTokenizer as exc:
            if asked == "graph":
                raise
            return "host", str(exc)
        # Measured on an idle 2-core CPU: a cold default protocol took 73 s on the graph path and
        # 114 s on the host path, whose callback leaves the model one of XLA's two threads.
        return "graph", "asked for" if asked == "graph" else "cold prompt cache: no callback per period"

    def _stored_b_path(self) -> str | None:
        for bot in self.config.bots:
            path = self.cell_path("B", bot)
            if path.exists():
                return json.loads(path.read_text(encoding="utf-8")).get("fingerprint", {}).get("llm_path", "host")
        return None

    def _cache_is_warm(self, backend) -> bool:
        """Whether the prompt cache file holds choice replies of this backend's model."""
        if self.cache_path is None or not Path(self.cache_path).exists():
            return False
        with Path(self.cache_path).open(encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if entry.get("backend") == backend.name and entry.get("model") == backend.model and "probs" in entry:
                    return True
        return False

    def prompt_limits(self) -> dict[str, float]:
        """The HP maxima the prompt prints ("Enemy bot HP: 245/300"): the scenario's, not the paper's."""
        import jaxarena

        params = jaxarena.make("Arena-v0", scenario=self.config.scenario)[1]
        return {"bot_max_hp": float(params.bot_hp), "npc_max_hp": float(params.npc_hp)}

    def graph_source(self):
        """The in-graph tag source (`jaxarena.llm.graph_tags.GraphTagSource`) of the backend's model."""
        if self._graph is None:
            from jaxarena.llm.graph_tags import GraphTagSource

            t = time.perf_counter()
            self._graph = GraphTagSource.from_backend(self.backend(), **self.prompt_limits())
            self.session["llm_load_s"] += time.perf_counter() - t
        return self._graph

    # -- computing --
    def selector(self):
        if self._selector is None:
            from jaxarena.llm.selector import TagSelector

            backend = self.backend()
            t = time.perf_counter()
            if hasattr(backend, "load"):
                backend.load()  # weights + tokenizer; compiling happens on first use (LLM time)
            self.session["llm_load_s"] += time.perf_counter() - t
            self._selector = TagSelector(
                backend, cache=self.cache_path is not None, cache_path=self.cache_path, **self.prompt_limits()
            )
        return self._selector

    def _rollout(self, combination: str, env, env_params) -> tuple[Any, float]:
        """The compiled rollout for a combination (compiled once; reused across bots).

        On the host path B's tag source is the selector's `jax_fn`: the
        compiled program keeps calling the selector it was traced with, so
        what changes per cell is the selector's state (context, on_call),
        never the function. On the graph path it is the `GraphTagSource`,
        whose weights are an argument of the program. F's program takes the
        held tag as an argument (`hold_tags`), so one program plays all four.
        """
        import jax

        from jaxarena.runner import hold_tags, make_runner

        if combination in self._compiled:
            return self._compiled[combination], 0.0
        c = self.config
        key = jax.numpy.asarray(cell_key_data(0, "aggressive"))
        if combination == "W":
            return self._whitebox_rollouts(env, env_params, key)
        policy, params, _, _ = self.policy(combination)
        if is_selector_label(combination):
            program, compile_s = self.selector_cells().compile(combination, env, env_params, policy, params, key)
            self._compiled[combination] = program
            return program, compile_s
        latency = c.latency_steps if combination == "B" else 0
        # Only a B run that prices its decisions keeps the states: the default B program is unchanged.
        record = combination == "B" and c.price_decisions

        def build(tag_source):
            return make_runner(
                env,
                env_params,
                policy,
                tag_source,
                c.episodes,
                latency_steps=latency,
                num_periods=c.num_periods,
                record_states=record,
            )

        extra_args: tuple = ()
        if combination == "B" and self.llm_path() == "graph":
            # The weights go in as an argument (part of the tag source's state), not as constants.
            graph = self.graph_source()
            state = graph.initial_state()
            run = build(graph.tag_fn())
            fn = jax.jit(lambda pp, prm, k, ts: run(pp, prm, k, 0, None, ts))
            extra_args = (state,)
        elif combination == "F":
            run = build(hold_tags)
            fn = jax.jit(lambda pp, prm, k, tag: run(pp, prm, k, tag))
            extra_args = (jax.numpy.int32(0),)
        else:
            if combination == "A":
                source = c.tag_a
            elif combination == "B":
                source = self.selector().jax_fn()
            else:
                source = self._oracle_source(env, env_params, policy, params)
            run = build(source)
            fn = jax.jit(lambda pp, prm, k: run(pp, prm, k, 0))
        t = time.perf_counter()
        program = fn.lower(params, env_params, key, *extra_args).compile()
        compile_s = time.perf_counter() - t
        if combination == "B" and extra_args:
            self._compiled[combination] = lambda pp, prm, k: program(pp, prm, k, *extra_args)
        else:
            self._compiled[combination] = program
        return self._compiled[combination], compile_s

    def _whitebox_rollouts(self, env, env_params, key) -> tuple[dict[str, Any], float]:
        """W's programs, one per squad (each is its own policy), compiled once and reused across
        bots; they are A's program but for the policy (fixed tag, team reward)."""
        import jax

        from jaxarena.runner import make_runner

        c = self.config
        programs, compile_s = {}, 0.0
        for name, (policy, params, _, _) in self.whitebox().items():
            run = make_runner(env, env_params, policy, c.tag_a, c.episodes, num_periods=c.num_periods)
            fn = jax.jit(lambda pp, prm, k, run=run: run(pp, prm, k, 0))
            t = time.perf_counter()
            programs[name] = fn.lower(params, env_params, key).compile()
            compile_s += time.perf_counter() - t
        self._compiled["W"] = programs
        return programs, compile_s

    def _oracle_source(self, env, env_params, policy, params):
        """Combination O's tag source, reporting each decision period to the progress bar."""
        import jax

        from jaxarena.oracle import oracle_tag_source
        from jaxarena.runner import StateTagSource

        c = self.config
        oracle = oracle_tag_source(
            env, env_params, policy, params, c.episodes, rollouts=c.oracle_rollouts, horizon_periods=c.num_periods
        )

        def report(time_s, done, tags):
            if self._period_hook is not None:
                self._period_hook(float(time_s), int(np.sum(done)))

        def choose(state, prm, features, prev_tags, done, time_s, key):
            tags = oracle(state, prm, features, prev_tags, done, time_s, key)
            # `tags` as an argument: the report comes once the period's pricing is done.
            jax.debug.callback(report, time_s, done, tags)
            return tags

        return StateTagSource(choose)

    def pricer(self, env, env_params, policy) -> DecisionPricer:
        """One compiled pricer per squad policy for the run (B's and C's are usually the same one)."""
        if policy not in self._pricers:
            c = self.config
            self._pricers[policy] = DecisionPricer(
                env, env_params, policy, rollouts=c.oracle_rollouts, horizon_periods=c.num_periods
            )
        return self._pricers[policy]

    def run_cell(self, combination: str, bot: str, on_progress: Callable[[int], None] = lambda n: None) -> dict:
        """Computes one cell and writes it atomically; returns it."""
        import jax

        import jaxarena
        from jaxarena.runner import schedule_of

        c = self.config
        if combination == "W":  # the squad-policy language reads Arena-v0's observation
            policy, params, env_id = None, None, DEFAULT_ENV_ID
        else:
            policy, params = self.policy(combination)[:2]
            env_id = policy_env_id(policy)
        # B, F and O play with tags, so their logged return includes the shaping their policy trained
        # on (Table 5's for the paper recipe); A's and W's is the team reward alone, the arena's default.
        # Outcomes do not depend on it.
        shaping = {} if combination in ("A", "W") else policy_shaping(policy)
        env, env_params = jaxarena.make(env_id, bot=bot, scenario=c.scenario, **shaping)
        selector, before, n_records = None, None, 0
        if combination == "B" and self.llm_path() == "host":
            selector = self.selector()
            selector.context = {"combination": combination, "bot": bot}
            before = selector.stats.as_dict()
            n_records = len(selector.records)
        compiled, compile_s = self._rollout(combination, env, env_params)
        key = jax.numpy.asarray(cell_key_data(c.seed, bot))
        if selector is not None:
            # The bar counts the batch's finished episodes, which each LLM call reports.
            selector.on_call = lambda stats, done: on_progress(done)
        _, periods, period_s = schedule_of(env_params)
        periods = c.num_periods or periods
        if combination == "O":

            def period_hook(time_s, done):
                self._extra_post = {"O": f"period {round(time_s / period_s) + 1}/{periods}"}
                on_progress(done)

            self._period_hook = period_hook
        t = time.perf_counter()
        try:
            if combination == "F":
                results = []
                for tag in range(NUM_TAGS):
                    results.append(jax.block_until_ready(compiled(params, env_params, key, jax.numpy.int32(tag))))
                    on_progress((tag + 1) * c.episodes // NUM_TAGS)
            elif combination == "W":
                results, squads = {}, self.whitebox()
                for i, (name, program) in enumerate(compiled.items()):
                    results[name] = jax.block_until_ready(program(squads[name][1], env_params, key))
                    on_progress((i + 1) * c.episodes // len(compiled))
            else:
                result = jax.block_until_ready(compiled(params, env_params, key))
        finally:
            if selector is not None:
                selector.on_call = None
            self._period_hook, self._extra_post = None, {}
        wall = time.perf_counter() - t
        episode_keys = np.asarray(jax.random.split(key, c.episodes))

        def episodes(r) -> dict:
            return {
                "episode_key": [f"{int(k[0]):08x}{int(k[1]):08x}" for k in episode_keys],
                "outcome": np.asarray(r.outcome).astype(int).tolist(),
                "duration_s": [round(float(x), 4) for x in np.asarray(r.duration_s)],
                "damage_dealt": [round(float(x), 3) for x in np.asarray(r.damage_dealt)],
                "damage_taken": [round(float(x), 3) for x in np.asarray(r.damage_taken)],
                "team_return": [round(float(x), 5) for x in np.asarray(r.team_return)],
                "tag_steps": np.asarray(r.tag_steps).astype(int).tolist(),
            }

        cell = {
            "format": CELL_FORMAT,
            "combination": combination,
            "bot": bot,
            "fingerprint": self.fingerprint(combination),
            "key": [int(x) for x in np.asarray(key)],
        }
        if combination == "F":
            # One episode set per held tag, all on the cell's (paired) key.
            cell["episodes_by_tag"] = [episodes(r) for r in results]
        elif combination == "W":
            cell["episodes_by_squad"] = {name: episodes(r) for name, r in results.items()}
        else:
            cell["episodes"] = episodes(result)
        cell.update(
            {
                "decisions": [],
                "llm": None,
                "timing": {"compile_s": compile_s, "wall_s": wall, "llm_s": 0.0, "simulation_s": wall},
            }
        )
        if combination == "O":
            cell["timing"]["oracle"] = "in the simulation"
        if combination == "B" and selector is None:
            # The LLM ran inside the rollout: its time is part of `simulation_s`.
            graph = self.graph_source()
            cell["decisions"] = graph.records.decision_records(result, {"combination": combination, "bot": bot})
            cell["llm"] = graph.records.counters(result)
            cell["timing"]["llm_path"] = "graph"
            if self.cache_path is not None:  # so that a later host-path run is warm
                from jaxarena.llm.cache import PromptCache

                PromptCache(self.cache_path).put_many(graph.records.cache_entries(result))
        if selector is not None:
            delta = _stats_delta(selector.stats.as_dict(), before)
            # `call` counts the selector's calls over the whole session; make it count from
            # the cell's start, so a resumed run logs exactly what an uninterrupted one does.
            cell["decisions"] = [{**d, "call": d["call"] - before["calls"]} for d in selector.records[n_records:]]
            cell["llm"] = delta
            cell["timing"]["llm_s"] = delta["host_seconds"]
            cell["timing"]["simulation_s"] = max(0.0, wall - delta["host_seconds"])
        if is_selector_label(combination):  # the selector and the LLM's table ran inside the rollout
            cell["decisions"] = selector_cells.records(combination, bot, result, period_s)
        priced = c.price_decisions if combination == "B" else c.price_c if combination == "C" else False
        if priced:
            cell["decisions"], cell["timing"]["pricing"] = self._price(
                result, cell["decisions"], env, env_params, policy, params, key, period_s, on_progress
            )
        write_atomic(self.cell_path(combination, bot), json.dumps(cell))
        self.computed.append(cell_name(combination, bot))
        return cell

    def _price(self, result, decisions, env, env_params, policy, params, key, period_s, on_progress):
        """B's decision records with the oracle's verdict, and the pricing's timings."""
        import jax

        states, periods, episodes = active_states(result)
        timing = {"states": int(periods.size), "rollouts": self.config.oracle_rollouts, "compile_s": 0.0, "wall_s": 0.0}
        if periods.size == 0:
            return decisions, timing
        pricer = self.pricer(env, env_params, policy)

        def progress(done, total):
            self._extra_post = {"pricing": f"{done}/{total} states"}
            on_progress(self.config.episodes)

        t = time.perf_counter()
        try:
            values = pricer.price(params, env_params, states, jax.random.fold_in(key, PRICING_STREAM), progress)
            values = jax.block_until_ready(values)
        finally:
            self._extra_post = {}
        # The pricer compiles on its first batch: report that apart from the pricing itself.
        timing["compile_s"], pricer.compile_s = pricer.compile_s, 0.0
        timing["wall_s"] = time.perf_counter() - t - timing["compile_s"]
        return annotate(decisions, values, periods, episodes, period_s), timing

    def run(self) -> dict[str, dict]:
        """All cells of the config, loaded or computed, by name in run order."""
        cells: dict[str, dict] = {}
        todo = []
        # A kill during a write can leave a temp file behind (never a torn cell); drop it.
        for stale in self.cells_dir.glob(".*.tmp") if self.cells_dir.exists() else ():
            stale.unlink(missing_ok=True)
        for comb, bot in self.config.cells():
            cell = self.load_cell(comb, bot)
            if cell is None:
                todo.append((comb, bot))
            else:
                cells[cell_name(comb, bot)] = cell
        bar = self._bar(len(cells), len(self.config.cells()))
        try:
            for comb, bot in todo:
                done_before = bar.n if bar is not None else 0
                if bar is not None:
                    bar.set_description(f"cell {cell_name(comb, bot)}")

                def on_progress(n, base=done_before):
                    if bar is not None:
                        bar.n = base + n
                        self._postfix(bar)

                cell = self.run_cell(comb, bot, on_progress)
                cells[cell_name(comb, bot)] = cell
                if bar is not None:
                    bar.n = done_before + self.config.episodes
                    self._cells_done += 1
                    self._postfix(bar)
                if self.after_cell is not None:
                    self.after_cell(cell_name(comb, bot), cell)
        finally:
            if bar is not None:
                bar.close()
        return {cell_name(c, b): cells[cell_name(c, b)] for c, b in self.config.cells()}

    def close(self) -> None:
        if self._selector is not None:
            self._selector.close()

    # -- progress display --
    def _bar(self, done_cells: int, total_cells: int):
        self._cells_done, self._cells_total = done_cells, total_cells
        if not self.progress:
            return None
        from tqdm.auto import tqdm

        bar = tqdm(
            total=total_cells * self.config.episodes,
            initial=done_cells * self.config.episodes,
            unit="ep",
            dynamic_ncols=True,
            smoothing=0.05,
        )
        self._postfix(bar)
        return bar

    def _postfix(self, bar) -> None:
        post = {"cells": f"{self._cells_done}/{self._cells_total}"}
        if self._selector is not None:
            s = self._selector.stats
            # calls: batched selector calls (one per period per cell); sent: prompts that reached the LLM
            post.update(llm_calls=s.calls, sent=s.llm_requests, cache_hits=s.cache_hits, fallbacks=s.fallback_total)
        post.update(self._extra_post)  # O's period, or B's pricing
        bar.set_postfix(post, refresh=False)
        bar.refresh()
