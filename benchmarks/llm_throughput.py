"""LLM tag-choice throughput: unique decisions per second and achieved GFLOP/s, host and in-graph paths.

Prints one JSON line each:
  load          weights-cache load time, cold (dequantize the GGUF and write the
                cache, in a temporary cache folder) and warm (read the cache);
  matmul        a plain bf16 matrix product chain with the shapes of one
                decision's forward pass (the four weight products of a block,
                M = rows x suffix tokens), on the same device in the same run:
                the GFLOP/s the forward pass could reach;
  host          `path: host`: batches of B distinct prompts through the
                generator's own host path (tokenize, shared-prefix KV cache,
                forward), for decode "choice" (one forward pass, the 4 option
                logits, a seeded pick) and "free" (read + 3 sampled tokens);
  graph         `path: graph`: batches of B distinct states through the
                in-graph tag source (`jaxarena.llm.graph_tags`): prompt tokens
                built on the device, deduplicated, chunked forward passes, choice;
  backend, selector, replies
                end to end through `EmbeddedBackend.generate` and
                `TagSelector.select` (cold and warm prompt cache), and what
                the model answered.

Each host/graph line has `unique_decisions_per_s`, `gflop_per_decision`
(from the model config and the real token counts: the ~45-token user turn
after the cached system prefix, attention included, the option logits' LM
head), `gflop_per_s` (useful FLOPs: padding not counted) and
`matmul_fraction` (gflop_per_s over the matmul line's). Also `loadavg_1m`
and `cpu_s_per_decision`: on a shared machine the wall-clock rate drops with
other load, CPU seconds per decision do not.

    python benchmarks/llm_throughput.py                           # CPU defaults
    python benchmarks/llm_throughput.py --graph-batches 100 600 4096
    python benchmarks/llm_throughput.py --gguf ollama:mistral     # a 7B GGUF too (GPU)

On a GPU (jax.default_backend() == "gpu") the defaults grow (host batch 32,
128, 512; graph 600, 4096, 16384, graph chunks of 512), and `--gguf PATH`
adds the same lines for that model if the `gguf` backend exists.

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


def distinct_states(n: int, seed: int) -> np.ndarray:
    """(n, 5) float32 states whose prompts are all different (so no deduplication helps)."""
    rng = np.random.default_rng(seed)
    rows, seen = [], set()
    while len(rows) < n:
        row = (int(rng.integers(1, 301)), int(rng.integers(1, 61)), int(rng.integers(1, 6)), int(rng.integers(0, 2)))
        key = row + (int(rng.integers(5, 400)),)
        if key not in seen:
            seen.add(key)
            rows.append([*row, key[-1] / 10])
    return np.asarray(rows, np.float32)


# ------------------------------------------------------------------ FLOPs
def decision_flops(cfg, suffix_tokens: int, prefix_len: int) -> float:
    """FLOPs of one choice decision: the forward pass over `suffix_tokens` after a cached prefix.

    Per token and block: the q/k/v, output, gate/up and down products, and
    attention over the prefix plus the causal part of the suffix; then the
    LM head at the last position (all of the vocabulary, as the program computes it).
    """
    d, h, kv, hd, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    weights = d * (h + 2 * kv) * hd + h * hd * d + d * 2 * f + f * d
    context = sum(prefix_len + i + 1 for i in range(suffix_tokens))
    attention = 2 * 2 * h * hd * context
    return float(cfg.n_layers * (2 * weights * suffix_tokens + attention) + 2 * d * cfg.vocab_size)


def matmul_line(cfg, rows: int, tokens: int, reps: int = 5) -> dict:
    """GFLOP/s of a block's four bf16 weight products at M = rows * tokens, chained over all layers."""
    import jax
    import jax.numpy as jnp

    d, h, kv, hd, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    m = rows * tokens
    shapes = [(d, (h + 2 * kv) * hd), (h * hd, d), (d, 2 * f), (f, d)]
    key = jax.random.key(0)
    ws = [jax.random.normal(key, s, jnp.bfloat16) * 0.02 for s in shapes]
    x = jax.random.normal(key, (m, d), jnp.bfloat16)

    def chain(x, ws):
        for _ in range(cfg.n_layers):
            qkv = jnp.matmul(x, ws[0], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
            x = x + jnp.matmul(qkv[:, : h * hd], ws[1], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
            gu = jnp.matmul(x, ws[2], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
            x = x + jnp.matmul(gu[:, :f], ws[3], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
        return x

    fn = jax.jit(chain)
    jax.block_until_ready(fn(x, ws))
    t = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(fn(x, ws))
    dt = (time.perf_counter() - t) / reps
    flops = cfg.n_layers * 2 * m * sum(a * b for a, b in shapes)
    return {"bench": "bf16_matmul", "rows": rows, "tokens": tokens, "m": m, "gflop_per_s": round(flops / dt / 1e9, 1)}


# ------------------------------------------------------------- measuring
def _rate_line(path, decode, batch, n, times, cpu, load0, flops, matmul_gflops, extra=None) -> dict:
    total = sum(times)
    gflops = flops / total / 1e9
    return {
        "bench": "llm_tag_choice" if decode == "choice" else "llm_generate",
        "path": path,
        "decode": decode,
        "batch": batch,
        "unique_decisions_per_s": round(n / total, 2),
        "gflop_per_decision": round(flops / n / 1e9, 2),
        "gflop_per_s": round(gflops, 1),
        "matmul_fraction": round(gflops / matmul_gflops, 3) if matmul_gflops else None,
        "batch_s_median": round(float(np.median(times)), 3),
        "cpu_s_per_decision": round(cpu / n, 4),
        "decisions": n,
        "loadavg_1m": round((load0 + os.getloadavg()[0]) / 2, 2),
        **(extra or {}),
    }


def host_lines(gen, batch, batches, decode, prefix_len, matmul_gflops):
    """Host path: batches of `batch` distinct prompts through the generator."""
    run = gen.generate if decode == "free" else gen.choose
    warm = distinct_prompts(batch, seed=10_000 + batch)
    t = time.perf_counter()
    run([(p.system, p.user) for p in warm])
    first = time.perf_counter() - t
    times, cpu, n, flops, seed = [], 0.0, 0, 0.0, 0
    load0 = os.getloadavg()[0]
    gens = []
    for _ in range(batches):
        prompts = distinct_prompts(batch, seed=seed)
        seed += 1
        pairs = [(p.system, p.user) for p in prompts]
        for s, u in pairs:
            ids = gen.tokenizer.encode(gen.tokenizer.render(s, u))
            flops += decision_flops(gen.cfg, len(ids) - prefix_len, prefix_len)
        t, c = time.perf_counter(), time.process_time()
        gens = run(pairs)
        times.append(time.perf_counter() - t)
        cpu += time.process_time() - c
        n += len(gens)
    line = _rate_line("host", decode, batch, n, times, cpu, load0, flops, matmul_gflops)
    line["first_call_s"] = round(first, 2)
    return line, gens


def graph_line(source, batch, batches, matmul_gflops):
    """In-graph path: batches of `batch` distinct states through `GraphTagSource.choose`."""
    import jax.numpy as jnp

    lines = source.lines
    t = time.perf_counter()
    source.choose(distinct_states(batch, seed=20_000 + batch))
    first = time.perf_counter() - t
    times, cpu, n, flops = [], 0.0, 0, 0.0
    load0 = os.getloadavg()[0]
    tokens_total = 0
    for b in range(batches):
        states = distinct_states(batch, seed=30_000 + b)
        _, n_pad = lines.tokens(jnp.asarray(states))
        real = lines.length - np.asarray(n_pad)
        tokens_total += int(real.sum())
        flops += sum(decision_flops(source.generator.cfg, int(r), source.prefix_len) for r in real)
        t, c = time.perf_counter(), time.process_time()
        tags, aux = source.choose(states)
        times.append(time.perf_counter() - t)
        cpu += time.process_time() - c
        n += int(aux["computed"])
    extra = {
        "first_call_s": round(first, 2),
        "chunk_sizes": list(source.chunk_sizes),
        "mean_suffix_tokens": round(tokens_total / n, 1),
        "padded_suffix_tokens": lines.length,
    }
    return _rate_line("graph", "choice", batch, n, times, cpu, load0, flops, matmul_gflops, extra)


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

    features = distinct_states(n, seed)
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


def model_lines(label, loaded, gen, args, extras: bool) -> None:
    """Every line for one model (a generator): matmul reference, host batches, graph batches."""
    from jaxarena.llm.graph_tags import GraphTagSource
    from jaxarena.llm.prompt import SYSTEM, parse_tag
    from jaxarena.llm.state_line import UnsupportedTokenizer

    prefix_len = len(gen._system_ids(SYSTEM))
    typical = len(gen.tokenizer.encode(distinct_prompts(1, 0)[0].user)) + 5  # the turn's markers
    ref_rows = max(args.batch_sizes)
    mm = matmul_line(gen.cfg, ref_rows, typical)
    mm["model"] = label
    print(json.dumps(mm), flush=True)
    mm_gflops = mm["gflop_per_s"]

    from jaxarena.llm.generate import GGUFGenerator

    last = {}
    for batch in args.batch_sizes:
        host_gen = GGUFGenerator(loaded, batch_buckets=(batch,))
        for decode in args.decodes:
            line, gens = host_lines(host_gen, batch, args.batches, decode, prefix_len, mm_gflops)
            line["model"] = label
            print(json.dumps(line), flush=True)
            last[decode] = (host_gen, gens)
    try:
        source = GraphTagSource(gen, chunk_sizes=args.graph_chunks)
    except UnsupportedTokenizer as exc:
        print(json.dumps({"bench": "llm_tag_choice", "path": "graph", "model": label, "skipped": str(exc)}))
        source = None
    if source is not None:
        for batch in args.graph_batches:
            line = graph_line(source, batch, args.graph_reps, mm_gflops)
            line["model"] = label
            print(json.dumps(line), flush=True)
    if not extras:
        return
    for decode, (host_gen, gens) in last.items():
        batch = max(args.batch_sizes)
        rate = _backend_rate(host_gen, batch, args.batches, seed=50_000, decode=decode)
        print(json.dumps({"bench": "llm_embedded_backend", "decode": decode, "batch": batch, **rate}), flush=True)
        sel = _selector_rates(host_gen, 4 * batch, seed=60_000, decode=decode)
        print(json.dumps({"bench": "llm_selector", "decode": decode, "batch": batch, **sel}), flush=True)
        texts = collections.Counter(g.text for g in gens)
        valid = sum(parse_tag(g.text, previous=0)[1] is None for g in gens)
        extra = {}
        if decode == "choice":
            extra["mean_probs"] = [round(float(x), 3) for x in np.mean([g.probs for g in gens], axis=0)]
        reply = {"prompts": len(gens), "valid_tags": valid, "replies": dict(texts.most_common(8)), **extra}
        print(json.dumps({"bench": "llm_embedded_replies", "decode": decode, **reply}), flush=True)


def main() -> None:
    import jax

    gpu = jax.default_backend() == "gpu"
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512] if gpu else [8, 32])
    ap.add_argument("--decodes", nargs="+", default=["choice", "free"], choices=["choice", "free"])
    ap.add_argument("--batches", type=int, default=4, help="timed host calls per batch size")
    ap.add_argument("--graph-batches", type=int, nargs="+", default=[600, 4096, 16384] if gpu else [100, 600, 4096])
    ap.add_argument("--graph-reps", type=int, default=1, help="timed graph calls per batch size")
    ap.add_argument("--graph-chunks", type=int, nargs="+", default=[512, 64] if gpu else [32, 8])
    ap.add_argument("--gguf", default=None, help="also measure this GGUF (a path or ollama:NAME), if supported")
    ap.add_argument("--skip-cold", action="store_true", help="skip the cold (dequantize) load")
    ap.add_argument("--no-extras", action="store_true", help="skip the backend/selector/replies lines")
    args = ap.parse_args()

    from jaxarena.llm.generate import GGUFGenerator
    from jaxarena.llm.weights import load_model

    info = {"jax": jax.__version__, "backend": jax.default_backend(), "cpu_count": os.cpu_count()}
    info["machine"] = platform.machine()
    print(json.dumps({**load_times(args.skip_cold), **info}), flush=True)

    loaded = load_model()
    model_lines("smollm2", loaded, GGUFGenerator(loaded), args, extras=not args.no_extras)
    if args.gguf:
        try:
            from jaxarena.llm.backends import make_backend

            backend = make_backend("gguf", path=args.gguf)
            gen = backend.load()
        except (ImportError, ValueError, TypeError, FileNotFoundError) as exc:
            print(
                json.dumps({"bench": "llm_tag_choice", "model": args.gguf, "skipped": f"{type(exc).__name__}: {exc}"})
            )
            return
        model_lines(args.gguf, load_model(gen.gguf_path), gen, args, extras=False)


if __name__ == "__main__":
    main()
