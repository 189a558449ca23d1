"""Embedded LLM throughput: unique prompts per second through the JAX SmolLM2.

Measures, printing one JSON line each:
  load        weights-cache load time, cold (dequantize the GGUF and write the
              cache, in a temporary cache folder) and warm (read the cache);
  batch B     for each batch size and decode mode ("free": read + 3 sampled
              tokens, Table 10; "choice": one forward pass, the 4 option
              logits, a seeded pick): compile time of the programs (first
              call minus a timed call), then prompts/s over `--batches` calls
              of B distinct prompts (realistic state lines, every prompt
              different, so no cache helps), through the generator's own
              path (tokenize, shared-prefix KV cache, forward);
  backend     unique decisions/s through `EmbeddedBackend.generate` (async
              API, chunks of the largest batch size), end to end;
  selector    decisions/s through `TagSelector.select` (the batched selector the
              rollout calls): a batch of distinct states with a cold prompt
              cache, then the same states again with a warm one;
  replies     what the model said for the prompts of the largest batch, per
              decode mode (reply counts, how many parse to a valid tag, and
              for choice the mean probability of each tag).

Each line also has `loadavg_1m` and `cpu_s_per_prompt`: on a shared machine the
wall-clock rate drops with other load, while CPU seconds per prompt do not.

    python benchmarks/llm_throughput.py [--batch-sizes 8 16 32] [--batches 4] [--skip-cold]

No XLA flags are set: turning YNNPACK fusions off (as the env benchmark does)
makes the bf16 matrix products 2-3x slower.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import tempfile
import time

import numpy as np


def distinct_prompts(n: int, seed: int):
    """n distinct Table 10 prompts with varied, realistic state values."""
    from jaxarena.llm.prompt import build_prompt

    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        alive = rng.randint(1, 5)
        p = build_prompt(rng.randint(1, 300), rng.randint(1, 60), alive, rng.random() < 0.5, rng.uniform(0.5, 40.0))
        if p.user not in seen:
            seen.add(p.user)
            out.append(p)
    return out


def _backend_rate(gen, batch: int, batches: int, seed: int, decode: str) -> dict:
    """Unique decisions/s through `EmbeddedBackend.generate` (async, in a thread)."""
    import asyncio

    from jaxarena.llm.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(decode=decode, max_batch=batch, generator=gen)
    prompts = distinct_prompts(batch * batches, seed=seed)
    t = time.perf_counter()
    replies = asyncio.run(backend.generate(prompts))
    dt = time.perf_counter() - t
    assert all(r.error is None for r in replies)
    return {"decisions_per_s": round(len(prompts) / dt, 2), "prompts": len(prompts)}


def _selector_rates(gen, n: int, seed: int, decode: str) -> dict:
    """Decisions/s through TagSelector.select: cold prompt cache, then warm."""
    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.selector import TagSelector

    rng = np.random.default_rng(seed)
    features = np.stack(
        [
            rng.integers(1, 301, n),  # bot HP
            rng.integers(1, 61, n),  # average NPC HP
            rng.integers(1, 6, n),  # NPCs alive
            rng.integers(0, 2, n),  # bot moving
            np.round(rng.uniform(0.5, 40.0, n), 1),  # nearest distance
        ],
        axis=-1,
    ).astype(np.float32)
    prev, done = np.zeros(n, np.int32), np.zeros(n, bool)
    backend = EmbeddedBackend(decode=decode, max_batch=32, generator=gen)
    with TagSelector(backend, cache=True, keep_records=False) as selector:
        t = time.perf_counter()
        selector.select(features, prev, done, 5.0)
        cold = time.perf_counter() - t
        unique = selector.stats.as_dict().get("unique_prompts", n)
        t = time.perf_counter()
        for _ in range(10):
            selector.select(features, prev, done, 10.0)
        warm = (time.perf_counter() - t) / 10
    return {
        "decisions": n,
        "unique_prompts": unique,
        "cold_decisions_per_s": round(n / cold, 2),
        "cached_decisions_per_s": round(n / warm, 1),
    }


def load_times(skip_cold: bool) -> dict:
    from jaxarena.llm import weights

    out = {"bench": "llm_embedded_load"}
    if not skip_cold:
        with tempfile.TemporaryDirectory() as tmp:
            old = os.environ.get("JAXARENA_CACHE")
            os.environ["JAXARENA_CACHE"] = tmp
            try:
                t = time.perf_counter()
                weights.load_model()
                out["cold_s"] = round(time.perf_counter() - t, 3)
                t = time.perf_counter()
                m = weights.load_model()
                out["warm_tmp_s"] = round(time.perf_counter() - t, 3)
                assert m.from_cache
            finally:
                if old is None:
                    os.environ.pop("JAXARENA_CACHE", None)
                else:
                    os.environ["JAXARENA_CACHE"] = old
    weights.load_model()  # make sure the user cache exists
    t = time.perf_counter()
    m = weights.load_model()
    out["warm_s"] = round(time.perf_counter() - t, 3)
    out["from_cache"] = m.from_cache
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--batches", type=int, default=4, help="timed calls per batch size")
    ap.add_argument("--skip-cold", action="store_true", help="skip the cold (dequantize) load")
    args = ap.parse_args()

    import jax

    from jaxarena.llm.generate import SmolLM2Generator
    from jaxarena.llm.prompt import parse_tag
    from jaxarena.llm.weights import load_model

    info = {"jax": jax.__version__, "cpu_count": os.cpu_count(), "machine": platform.machine()}
    print(json.dumps({**load_times(args.skip_cold), **info}), flush=True)

    loaded = load_model()
    last, backend_rate, selector_rate = {}, {}, {}
    for B in args.batch_sizes:
        gen = SmolLM2Generator(loaded, batch_buckets=(B,))
        for decode in ("free", "choice"):
            run = gen.generate if decode == "free" else gen.choose
            seed = 0  # the same prompts for both modes
            warm = distinct_prompts(B, seed=10_000 + B)
            t = time.perf_counter()
            run([(p.system, p.user) for p in warm])
            compile_s = time.perf_counter() - t
            times, cpu, n = [], 0.0, 0
            load0 = os.getloadavg()[0]
            for _ in range(args.batches):
                prompts = distinct_prompts(B, seed=seed)
                seed += 1
                t, c = time.perf_counter(), time.process_time()
                gens = run([(p.system, p.user) for p in prompts])
                times.append(time.perf_counter() - t)
                cpu += time.process_time() - c
                n += len(gens)
            last[decode] = gens
            if B == max(args.batch_sizes):
                backend_rate[decode] = _backend_rate(gen, B, args.batches, seed=50_000, decode=decode)
                selector_rate[decode] = _selector_rates(gen, 4 * B, seed=60_000, decode=decode)
            _print_batch(B, decode, n, times, compile_s, cpu, load0)
        del gen

    for decode, gens in last.items():
        B = max(args.batch_sizes)
        line = {"bench": "llm_embedded_backend", "decode": decode, "batch": B, **backend_rate[decode]}
        print(json.dumps(line), flush=True)
        print(json.dumps({"bench": "llm_selector", "decode": decode, "batch": B, **selector_rate[decode]}), flush=True)
        texts = collections.Counter(g.text for g in gens)
        valid = sum(parse_tag(g.text, previous=0)[1] is None for g in gens)
        extra = {}
        if decode == "choice":
            extra["mean_probs"] = [round(float(x), 3) for x in np.mean([g.probs for g in gens], axis=0)]
        print(
            json.dumps(
                {
                    "bench": "llm_embedded_replies",
                    "decode": decode,
                    "prompts": len(gens),
                    "valid_tags": valid,
                    "replies": dict(texts.most_common(8)),
                    **extra,
                }
            ),
            flush=True,
        )


def _print_batch(B, decode, n, times, compile_s, cpu, load0) -> None:
    line = {
        "bench": "llm_embedded",
        "decode": decode,
        "batch": B,
        "prompts_per_s": round(n / sum(times), 2),
        "best_batch_prompts_per_s": round(B / min(times), 2),
        "batch_s_median": round(float(np.median(times)), 3),
        # First call = compile (the mode's programs and the prefix) + one run.
        "first_call_s": round(compile_s, 2),
        "compile_s": round(compile_s - float(np.median(times)), 2),
        # CPU seconds (all threads) per prompt. On a shared machine the wall-clock
        # rate understates what dedicated cores give; cores / cpu_s_per_prompt bounds it.
        "cpu_s_per_prompt": round(cpu / n, 4),
        "prompts": n,
        "loadavg_1m": round((load0 + os.getloadavg()[0]) / 2, 2),
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
