"""Running the protocol's cells: (combination, bot) batches of seeded episodes.

A *cell* is one combination (A or B) against one bot type: `episodes` episodes
run as one vmapped batch under one jitted `jaxarena.llm.make_rollout` program
(outer scan over 5 s decision periods, inner scan over 50 steps). Both
combinations go through that same code path and differ only in

- the policy (A's or B's checkpoint), and
- the tag source: a fixed tag 0 for A; for B the LLM `TagSelector`, called
  once per decision period for the whole batch through `io_callback`.

Paired design: a cell's key depends only on (seed, bot), so A and B meet the
same spawns, the same balanced-bot schedules and the same policy-sampling keys
episode for episode (`make_rollout` derives episode i's keys from (key, i)).

Resume: each finished cell is written atomically to `cells/<comb>_<bot>.json`
(episodes, that cell's LLM decisions, counters and timings) together with a
fingerprint of everything that determines its results. A re-run loads the
cells whose fingerprint matches and computes only the missing ones; a cell is
either complete on disk or absent, never half written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BOTS: tuple[str, ...] = ("aggressive", "evasive", "balanced")
COMBINATIONS: tuple[str, ...] = ("A", "B")
#: A cell's key is fold_in(PRNGKey(seed), BOT_INDEX[bot]): the same whichever bots are run.
BOT_INDEX: dict[str, int] = {b: i for i, b in enumerate(BOTS)}
CELL_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ProtocolConfig:
    """Everything that defines a protocol run (the paper's defaults).

    policy_a / policy_b: checkpoint directories, "A"/"B" for the shipped
      policies, or "scripted:focus_fire" / "scripted:random" (reference squads).
    llm: "embedded" (in-process SmolLM2-135M, the default) or "ollama".
    model: the Ollama model (e.g. "mistral"); ignored by the embedded backend.
    greedy: take the policy's most likely action instead of sampling it.
    tag_a: Combination A's fixed tag (0 in the paper).
    latency_steps: ticks between a decision and its tag taking effect (0 = at once).
    num_periods: decision periods per episode; None = a full 120 s episode
      (only tests shorten it).
    """

    episodes: int = 100
    seed: int = 0
    bots: tuple[str, ...] = BOTS
    combinations: tuple[str, ...] = COMBINATIONS
    policy_a: str = "A"
    policy_b: str = "B"
    greedy: bool = False
    llm: str = "embedded"
    model: str | None = None
    host: str | None = None
    tag_a: int = 0
    latency_steps: int = 0
    num_periods: int | None = None
    n_boot: int = 10_000

    def __post_init__(self):
        for b in self.bots:
            if b not in BOT_INDEX:
                raise ValueError(f"unknown bot {b!r}; choose from {BOTS}")
        for c in self.combinations:
            if c not in COMBINATIONS:
                raise ValueError(f"unknown combination {c!r}; choose from {COMBINATIONS}")
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        if self.llm not in ("embedded", "ollama"):
            raise ValueError(f"unknown LLM backend {self.llm!r}; use 'embedded' or 'ollama'")

    def policy_for(self, combination: str) -> str:
        return self.policy_a if combination == "A" else self.policy_b

    def cells(self) -> list[tuple[str, str]]:
        """(combination, bot) in run order: all of A first (fast), then B."""
        return [(c, b) for c in self.combinations for b in self.bots]

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bots"], d["combinations"] = list(self.bots), list(self.combinations)
        return d


# --------------------------------------------------------------------------- policies


def resolve_policy(spec: str, greedy: bool = False):
    """(policy, params, checksum, source) for a policy spec; see `ProtocolConfig`.

    The checksum is the sha256 of the checkpoint directory (every file's
    relative path and bytes, in sorted order), so a report names exactly which
    weights produced it.
    """
    if spec.startswith("scripted:"):
        from jaxarena.algorithms import evaluation

        name = spec.split(":", 1)[1]
        fns = {"focus_fire": evaluation.focus_fire_policy, "random": evaluation.random_policy}
        if name not in fns:
            raise ValueError(f"unknown scripted policy {name!r}; choose from {sorted(fns)}")
        fn = fns[name]

        def scripted(params, obs, key):
            return fn(obs, key)

        scripted.env_id = "Arena-v0"
        return scripted, None, "sha256:" + _sha(spec.encode()), spec
    from jaxarena.algorithms.checkpoint import load_policy, resolve_path

    try:
        directory = resolve_path(spec)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"policy {spec!r} not found ({exc}). Pass a trained run directory with --policy-a/--policy-b."
        ) from None
    policy, params = load_policy(directory, greedy=greedy)
    return policy, params, "sha256:" + directory_checksum(directory), str(directory)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def directory_checksum(directory: str | os.PathLike) -> str:
    """sha256 over a directory's files (relative path + contents), in sorted order."""
    root = Path(directory)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- atomic files


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write a file so that readers see either the old or the new contents, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode, **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def cell_name(combination: str, bot: str) -> str:
    return f"{combination}_{bot}"


def cell_key_data(seed: int, bot: str) -> np.ndarray:
    """Raw uint32 key of a cell; identical for A and B (the paired design)."""
    import jax

    return np.asarray(jax.random.fold_in(jax.random.PRNGKey(seed), BOT_INDEX[bot]))


# --------------------------------------------------------------------------- the runner


class _ProgressTagSource:
    """The LLM tag source of a B cell, reporting progress before delegating to the selector.

    The rollout calls it once per decision period with the batch's `done`
    mask, which is exactly the number of finished episodes the progress bar wants.
    """

    def __init__(self, selector, on_progress: Callable[[int], None]):
        self.selector = selector
        self.on_progress = on_progress

    def select(self, features, prev_tags, done, time_s):
        self.on_progress(int(np.sum(np.asarray(done))))
        return self.selector.select(features, prev_tags, done, time_s)

    def tag_fn(self):
        """Jittable TagFn: one ordered io_callback per period, so decisions are logged in order."""
        import jax
        import jax.numpy as jnp
        from jax.experimental import io_callback

        def fn(features, prev_tags, done, time_s, key=None):
            shape = jax.ShapeDtypeStruct(prev_tags.shape, jnp.int32)
            return io_callback(self.select, shape, features, prev_tags, done, time_s, ordered=True)

        return fn


def _stats_delta(after: dict, before: dict) -> dict:
    out = {}
    for k, v in after.items():
        if isinstance(v, dict):
            out[k] = {kk: v[kk] - before.get(k, {}).get(kk, 0) for kk in v}
        elif isinstance(v, list):
            b = before.get(k, [0] * len(v))
            out[k] = [x - y for x, y in zip(v, b)]
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
        self._tag_source: _ProgressTagSource | None = None
        self.session: dict[str, float] = {"policy_load_s": 0.0, "llm_load_s": 0.0}
        self.computed: list[str] = []  # cells computed (not loaded) in this session

    # -- identity --
    def policy(self, combination: str):
        spec = self.config.policy_for(combination)
        if spec not in self._policies:
            t = time.perf_counter()
            self._policies[spec] = resolve_policy(spec, greedy=self.config.greedy)
            self.session["policy_load_s"] += time.perf_counter() - t
        return self._policies[spec]

    def llm_identity(self) -> dict:
        backend = self.backend()
        return {"backend": backend.name, "model": backend.model, "options": dict(backend.options),
                **({"host": backend.host} if getattr(backend, "host", None) else {})}

    def backend(self):
        if self._backend is None:
            from jaxarena.llm.selector import make_backend

            kwargs = {}
            if self.config.llm == "ollama":
                kwargs = {"model": self.config.model or "mistral", "host": self.config.host}
            self._backend = make_backend(self.config.llm, **kwargs)
        return self._backend

    def fingerprint(self, combination: str) -> dict:
        """Everything a cell's results depend on; a stored cell is reused only if this matches."""
        c = self.config
        fp = {
            "format": CELL_FORMAT,
            "episodes": c.episodes,
            "seed": c.seed,
            "policy": self.policy(combination)[2],
            "greedy": c.greedy,
            "num_periods": c.num_periods,
        }
        if combination == "A":
            fp["tag"] = c.tag_a
        else:
            fp["llm"] = {k: v for k, v in self.llm_identity().items() if k != "host"}
            fp["latency_steps"] = c.latency_steps
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
        if cell.get("fingerprint") != self.fingerprint(combination):
            raise RuntimeError(
                f"{path} was produced by a different configuration "
                f"({cell.get('fingerprint')} != {self.fingerprint(combination)}); "
                "use another --run-id, or --fresh to discard it"
            )
        return cell

    # -- computing --
    def selector(self):
        if self._selector is None:
            from jaxarena.llm.selector import TagSelector

            backend = self.backend()
            t = time.perf_counter()
            if hasattr(backend, "load"):
                backend.load()  # weights + tokenizer; compiling happens on first use (LLM time)
            self.session["llm_load_s"] += time.perf_counter() - t
            self._selector = TagSelector(backend, cache=self.cache_path is not None, cache_path=self.cache_path)
        return self._selector

    def _rollout(self, combination: str, env, env_params, tag_source) -> tuple[Any, float]:
        """The compiled rollout for a combination (compiled once; reused across bots)."""
        import jax
        from jaxarena.llm.rollout import make_rollout

        if combination in self._compiled:
            return self._compiled[combination], 0.0
        policy, params, _, _ = self.policy(combination)
        fn = make_rollout(
            env, env_params, policy, tag_source, self.config.episodes,
            latency_steps=self.config.latency_steps if combination == "B" else 0,
            num_periods=self.config.num_periods,
        )
        t = time.perf_counter()
        compiled = fn.lower(params, env_params, jax.numpy.asarray(cell_key_data(0, "aggressive"))).compile()
        compile_s = time.perf_counter() - t
        self._compiled[combination] = compiled
        return compiled, compile_s

    def run_cell(self, combination: str, bot: str, on_progress: Callable[[int], None] = lambda n: None) -> dict:
        """Computes one cell and writes it atomically; returns it."""
        import jax

        import jaxarena

        c = self.config
        policy, params = self.policy(combination)[:2]
        env, env_params = jaxarena.make(policy.env_id, bot=bot)
        selector, before, n_records = None, None, 0
        if combination == "A":
            tag_source = c.tag_a
        else:
            selector = self.selector()
            selector.context = {"combination": combination, "bot": bot}
            before = selector.stats.as_dict()
            n_records = len(selector.records)
            # One tag source for the run: the compiled B program (reused for every bot)
            # keeps calling the object it was traced with, so only its callback changes.
            if self._tag_source is None:
                self._tag_source = _ProgressTagSource(selector, on_progress)
            self._tag_source.on_progress = on_progress
            tag_source = self._tag_source.tag_fn()
        compiled, compile_s = self._rollout(combination, env, env_params, tag_source)
        key = jax.numpy.asarray(cell_key_data(c.seed, bot))
        t = time.perf_counter()
        result = jax.block_until_ready(compiled(params, env_params, key))
        wall = time.perf_counter() - t
        episode_keys = np.asarray(jax.random.split(key, c.episodes))

        cell = {
            "format": CELL_FORMAT,
            "combination": combination,
            "bot": bot,
            "fingerprint": self.fingerprint(combination),
            "key": [int(x) for x in np.asarray(key)],
            "episodes": {
                "episode_key": [f"{int(k[0]):08x}{int(k[1]):08x}" for k in episode_keys],
                "outcome": np.asarray(result.outcome).astype(int).tolist(),
                "duration_s": [round(float(x), 4) for x in np.asarray(result.duration_s)],
                "damage_dealt": [round(float(x), 3) for x in np.asarray(result.damage_dealt)],
                "damage_taken": [round(float(x), 3) for x in np.asarray(result.damage_taken)],
                "team_return": [round(float(x), 5) for x in np.asarray(result.team_return)],
                "tag_steps": np.asarray(result.tag_steps).astype(int).tolist(),
            },
            "decisions": [],
            "llm": None,
            "timing": {"compile_s": compile_s, "wall_s": wall, "llm_s": 0.0, "simulation_s": wall},
        }
        if selector is not None:
            delta = _stats_delta(selector.stats.as_dict(), before)
            # `call` counts the selector's calls over the whole session; make it count from
            # the cell's start, so a resumed run logs exactly what an uninterrupted one does.
            cell["decisions"] = [{**d, "call": d["call"] - before["calls"]} for d in selector.records[n_records:]]
            cell["llm"] = delta
            cell["timing"]["llm_s"] = delta["host_seconds"]
            cell["timing"]["simulation_s"] = max(0.0, wall - delta["host_seconds"])
        write_atomic(self.cell_path(combination, bot), json.dumps(cell))
        self.computed.append(cell_name(combination, bot))
        return cell

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

        bar = tqdm(total=total_cells * self.config.episodes, initial=done_cells * self.config.episodes,
                   unit="ep", dynamic_ncols=True, smoothing=0.05)
        self._postfix(bar)
        return bar

    def _postfix(self, bar) -> None:
        post = {"cells": f"{self._cells_done}/{self._cells_total}"}
        if self._selector is not None:
            s = self._selector.stats
            # calls: batched selector calls (one per period per cell); sent: prompts that reached the LLM
            post.update(llm_calls=s.calls, sent=s.llm_requests, cache_hits=s.cache_hits, fallbacks=s.fallback_total)
        bar.set_postfix(post, refresh=False)
        bar.refresh()
