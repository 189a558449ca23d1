"""Pricing a cell's decisions with the counterfactual oracle (`jaxarena.analysis.oracle`): B's, or C's.

A rollout run with `record_states=True` keeps the `EnvState` of every
decision; `DecisionPricer` plays each of those states out under each of the
four tags (K playouts per tag, the cell's squad policy) and `annotate` adds to each
decision record what the oracle found: `oracle_win` (the four win
probabilities), `oracle_best`, `regret` (Q(best) - Q(chosen), in win
probability) and `agrees` (the chosen tag is one of the best).

The chunking is `jaxarena.analysis.oracle.price_states`'s (fixed-size chunks, the last
padded with the first state, chunk c keyed `fold_in(key, c)`), with one
compiled pricer kept for the whole run: `price_states` builds its program per
call, which would recompile it for every bot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: Decision states priced per compiled batch (as `price_states`' default).
CHUNK = 64
#: Stream of a cell's pricing keys: `fold_in(cell key, PRICING_STREAM)`, apart from the episodes' keys.
PRICING_STREAM = 0x0AC1E


def active_states(result) -> tuple[Any, np.ndarray, np.ndarray]:
    """(states (M, ...), periods (M,), episodes (M,)) of the decisions actually made, period-major."""
    import jax

    periods, episodes = np.nonzero(np.asarray(result.decision_active))
    states = jax.tree.map(lambda x: x[periods, episodes], result.decision_states)
    return states, periods, episodes


class DecisionPricer:
    """Q(s, tag) of a squad's decision states, one compiled program of `CHUNK` states for the run.

    Built from the first cell's env and params; later cells may pass the params
    of another bot (same shapes) without recompiling.
    """

    def __init__(self, env, env_params, policy, *, rollouts: int, horizon_periods: int | None):
        from jaxarena.analysis.oracle import make_pricer

        self.rollouts = rollouts
        self._jitted = make_pricer(env, env_params, policy, CHUNK, rollouts=rollouts, horizon_periods=horizon_periods)
        self._price = None
        self.compile_s = 0.0  # compile time not yet reported (the runner reads and resets it)

    def price(
        self,
        policy_params,
        env_params,
        states,
        key,
        progress: Callable[[int, int], None] | None = None,
    ):
        """`TagValues` of the M states (leaves with a leading (M,) axis), M >= 1."""
        import jax
        import jax.numpy as jnp

        total = int(jax.tree.leaves(states)[0].shape[0])
        if total == 0:
            raise ValueError("no decision states to price")
        parts = []
        for c, start in enumerate(range(0, total, CHUNK)):
            idx = np.arange(start, start + CHUNK)
            idx = np.where(idx < total, idx, 0)
            batch = jax.tree.map(lambda x, i=idx: x[i], states)
            chunk_key = jax.random.fold_in(key, c)
            if self._price is None:
                t = time.perf_counter()
                self._price = self._jitted.lower(policy_params, env_params, batch, chunk_key).compile()
                self.compile_s += time.perf_counter() - t
            values = self._price(policy_params, env_params, batch, chunk_key)
            keep = min(CHUNK, total - start)
            parts.append(jax.tree.map(lambda x, k=keep: x[:k], values))
            if progress is not None:
                progress(start + keep, total)
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def annotate(decisions: list[dict], values, periods: np.ndarray, episodes: np.ndarray, period_s: float) -> list[dict]:
    """The decision records with the oracle's fields added, matched by (period, episode).

    `values` are the `TagValues` of the states `active_states` returned (same
    order as `periods`/`episodes`); every record must have its state.
    """
    index = {(int(p), int(e)): m for m, (p, e) in enumerate(zip(periods, episodes, strict=True))}
    if len(index) != len(decisions):
        raise RuntimeError(f"{len(decisions)} decision records but {len(index)} recorded decision states")
    win = np.asarray(values.win)
    rows = [index[(round(d["time_s"] / period_s), int(d["episode"]))] for d in decisions]
    chosen = np.asarray([d["tag"] for d in decisions], np.int32)
    take = np.asarray(rows, np.int64)
    sub = values.replace(**{k: getattr(values, k)[take] for k in ("win", "ret", "ret_se", "best")})
    regret = np.asarray(sub.regret(chosen))
    agrees = np.asarray(sub.agrees(chosen))
    best = np.asarray(sub.best)
    return [
        {
            **d,
            "oracle_win": [round(float(x), 6) for x in win[m]],
            "oracle_best": int(best[i]),
            "regret": round(float(regret[i]), 6),
            "agrees": bool(agrees[i]),
        }
        for i, (d, m) in enumerate(zip(decisions, rows, strict=True))
    ]


def price_cell(context, result, decisions: list[dict], env, env_params, policy, params, key, progress):
    """A cell's decision records with the oracle's verdict, and the pricing's timings.

    One compiled pricer per squad policy for the run (B's and C's are usually the same one), kept in
    the run's context; the pricing keys come from the cell's key on a stream of their own.
    """
    import jax

    from jaxarena.runner import schedule_of

    c = context.config
    states, periods, episodes = active_states(result)
    timing = {"states": int(periods.size), "rollouts": c.oracle_rollouts, "compile_s": 0.0, "wall_s": 0.0}
    if periods.size == 0:
        return decisions, timing
    pricers = context.shared("pricers", dict)
    if policy not in pricers:
        pricers[policy] = DecisionPricer(
            env, env_params, policy, rollouts=c.oracle_rollouts, horizon_periods=c.num_periods
        )
    pricer = pricers[policy]
    t = time.perf_counter()
    values = pricer.price(
        params,
        env_params,
        states,
        jax.random.fold_in(key, PRICING_STREAM),
        lambda done, total: progress(c.episodes, pricing=f"{done}/{total} states"),
    )
    values = jax.block_until_ready(values)
    # The pricer compiles on its first batch: report that apart from the pricing itself.
    timing["compile_s"], pricer.compile_s = pricer.compile_s, 0.0
    timing["wall_s"] = time.perf_counter() - t - timing["compile_s"]
    return annotate(decisions, values, periods, episodes, schedule_of(env_params)[2]), timing
