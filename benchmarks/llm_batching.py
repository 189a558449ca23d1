"""Concurrency and deduplication of the LLM tag selector, against a slow server.

The test server (`jaxarena.llm.testing`) answers each request after a fixed
delay (default 200 ms) and works on at most 4 requests at once (its "parallel
slots", like OLLAMA_NUM_PARALLEL=4). The selector sends through the real
`OllamaBackend` with 4 requests in flight.

Phases (one JSON line each, then a summary line):
  concurrent  400 unique prompts in one selector call. Target: < 25 s, i.e.
              >= 3.2x faster than sequential (ideal: 400 x 0.2 / 4 = 20 s).
  sequential  the same server, one request at a time (a 1-slot backend), on
              --sequential N prompts (default 100, or all 400 with
              --full-sequential); the per-prompt time is scaled to 400.
  duplicates  the 400 prompts repeated 3 times, shuffled, in one call (1200
              episodes) with the cache off: the server must see each unique
              prompt exactly once, so the time matches the concurrent phase.
  rollout_overhead  (skip with --no-rollout) the selector's cost inside the
              jitted rollout: 100 full episodes with a fixed tag, against the
              same episodes with the LLM selector on a warm cache (so no
              requests are made, and what remains is the io_callback, the
              prompts, the cache look-ups and the log).

The replies come from the fast hash-digit responder, so the time measured is
the selector's and the protocol's, not a model's (pass --responder embedded
to use the real model; then the delay adds to the model's own time).

    python benchmarks/llm_batching.py [--prompts 400] [--delay-s 0.2] [--slots 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import ServerProcess


def unique_features(n: int) -> np.ndarray:
    """(n, 5) features whose prompts are all different (bot HP and distance vary)."""
    k = np.arange(n)
    return np.stack([k % 301, 60.0 - (k // 301) % 61, np.full(n, 5.0), k % 2, 1.0 + 0.1 * (k // 301)], axis=1).astype(
        np.float32
    )


def timed_call(selector: TagSelector, feats: np.ndarray) -> float:
    n = len(feats)
    start = time.perf_counter()
    selector.select(feats, np.zeros(n, np.int32), np.zeros(n, bool), 0.0)
    return time.perf_counter() - start


def rollout_overhead(url: str, episodes: int = 100) -> dict:
    """Times full jitted rollouts: fixed tag vs the LLM selector on a warm cache."""
    import jax

    import jaxarena
    from jaxarena.llm.rollout import make_rollout

    env, params = jaxarena.make("Arena-v0", bot="balanced")

    def policy(p, obs, key):
        return jax.random.randint(key, (5,), 0, 6)

    def best_of(rollout, repeats=3) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(rollout(None, params, jax.random.key(0)))
            times.append(time.perf_counter() - start)
        return min(times)

    fixed = make_rollout(env, params, policy, 0, episodes)
    jax.block_until_ready(fixed(None, params, jax.random.key(0)))  # compile
    fixed_s = best_of(fixed)
    with TagSelector(OllamaBackend("mistral", url)) as selector:
        llm = make_rollout(env, params, policy, selector, episodes)
        jax.block_until_ready(llm(None, params, jax.random.key(0)))  # compile, and fill the cache
        requests = selector.stats.llm_requests
        host_before, calls_before = selector.stats.host_seconds, selector.stats.calls
        llm_s = best_of(llm)
        warm_requests = selector.stats.llm_requests - requests
        host_s = (selector.stats.host_seconds - host_before) / 3
        calls = (selector.stats.calls - calls_before) // 3
        decisions = len(selector.records) // 4
    return {
        "phase": "rollout_overhead",
        "episodes": episodes,
        "fixed_tag_s": round(fixed_s, 3),
        "llm_warm_cache_s": round(llm_s, 3),
        "overhead_s": round(llm_s - fixed_s, 3),
        "selector_host_s": round(host_s, 4),
        "callbacks": calls,
        "decisions": decisions,
        "requests_with_warm_cache": warm_requests,
    }


def emit(record: dict) -> None:
    print(json.dumps({"bench": "llm_batching", **record}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--delay-s", type=float, default=0.2)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--sequential", type=int, default=100, help="prompts timed one at a time")
    parser.add_argument("--full-sequential", action="store_true", help="time all prompts sequentially")
    parser.add_argument("--responder", default="hash-digit")
    parser.add_argument("--target-s", type=float, default=25.0)
    parser.add_argument("--min-speedup", type=float, default=3.2)
    parser.add_argument("--no-rollout", action="store_true", help="skip the rollout_overhead phase")
    args = parser.parse_args()

    feats = unique_features(args.prompts)
    with ServerProcess(responder=args.responder, models=["mistral"], slots=args.slots, delay_s=args.delay_s) as server:
        emit(
            {
                "phase": "setup",
                "prompts": args.prompts,
                "delay_s": args.delay_s,
                "slots": args.slots,
                "responder": args.responder,
                "python": platform.python_version(),
                "machine": platform.machine(),
            }
        )

        # Concurrent: one call, 4 requests in flight.
        with TagSelector(OllamaBackend("mistral", server.url, concurrency=args.slots), cache=False) as sel:
            timed_call(sel, unique_features(args.slots))  # warm the connection pool, not timed
            server.reset()
            concurrent_s = timed_call(sel, feats)
            stats = server.stats()
            overhead = sel.stats.host_seconds - sel.stats.llm_seconds
        emit(
            {
                "phase": "concurrent",
                "prompts": args.prompts,
                "seconds": round(concurrent_s, 3),
                "server_requests": stats["requests"],
                "max_in_slots": stats["max_in_slots"],
                "selector_overhead_s": round(overhead, 4),
                "ideal_s": round(args.prompts * args.delay_s / args.slots, 3),
            }
        )

        # Sequential: the same server, one request at a time.
        n_seq = args.prompts if args.full_sequential else min(args.sequential, args.prompts)
        with TagSelector(OllamaBackend("mistral", server.url, concurrency=1), cache=False) as sel:
            server.reset()
            seq_s = timed_call(sel, feats[:n_seq])
        sequential_s = seq_s * args.prompts / n_seq
        emit(
            {
                "phase": "sequential",
                "prompts_timed": n_seq,
                "seconds_timed": round(seq_s, 3),
                "seconds_for_all": round(sequential_s, 3),
                "scaled": n_seq != args.prompts,
                "server_requests": server.stats()["requests"],
            }
        )

        # Duplicates: each unique prompt three times, shuffled; the server must see it once.
        repeated = np.concatenate([feats, feats, feats])[np.random.default_rng(0).permutation(3 * args.prompts)]
        with TagSelector(OllamaBackend("mistral", server.url, concurrency=args.slots), cache=False) as sel:
            server.reset()
            dup_s = timed_call(sel, repeated)
            stats = server.stats()
        emit(
            {
                "phase": "duplicates",
                "episodes": len(repeated),
                "unique_prompts": args.prompts,
                "seconds": round(dup_s, 3),
                "server_requests": stats["requests"],
                "server_unique_prompts": stats["unique_prompts"],
                "server_duplicate_requests": stats["duplicate_requests"],
            }
        )

        if not args.no_rollout:
            server.set_faults(delay_s=0.0)  # filling the cache is not what this phase measures
            emit(rollout_overhead(server.url))

    speedup = sequential_s / concurrent_s
    ok = (
        concurrent_s < args.target_s
        and speedup >= args.min_speedup
        and stats["requests"] == args.prompts
        and stats["duplicate_requests"] == 0
    )
    emit(
        {
            "phase": "summary",
            "concurrent_s": round(concurrent_s, 3),
            "sequential_s": round(sequential_s, 3),
            "speedup": round(speedup, 2),
            "duplicates_s": round(dup_s, 3),
            "target_s": args.target_s,
            "min_speedup": args.min_speedup,
            "pass": ok,
        }
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
