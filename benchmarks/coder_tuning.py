"""The coder's tuning step against its forward pass, in one run (`jaxarena.coder.tuning`).

    python benchmarks/coder_tuning.py               # SmolLM2-135M, the coder's real 2.6 k-token system prompt
    python benchmarks/coder_tuning.py --batch 2     # the trainer's default batch

Lines (JSON): the forward over the suffixes (log-probs of the reply tokens,
attending to the base model's prefix cache), the SFT step that training runs
(every block's activations kept) and the same step recomputing each block in
the backward (`remat`). The process keeps freed memory and shares one malloc
arena between threads, as `jaxarena-tune-coder train` does
(`jaxarena.host_memory`); `--system-malloc` leaves glibc's allocator as it
is, to compare the two in back-to-back runs. The summary gives
`backward_over_forward`, (step - forward) / forward, for the step training runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import jax
import optax

HOST_MEMORY_OPT_OUT = "JAXARENA_SYSTEM_MALLOC"  # jaxarena.host_memory.OPT_OUT, set before jaxarena is imported


def timed(fn, repeats: int) -> float:
    """Best of `repeats` + 1 calls (the first compiles when the program is new)."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2, help="timed calls of each program, after one untimed")
    p.add_argument("--system-malloc", action="store_true", help="leave glibc's allocator settings as they are")
    p.add_argument("--baseline", default="surround_strike", help="the reply: a white-box baseline's program")
    p.add_argument("--batch", type=int, default=1, help="copies of the example per step")
    p.add_argument("--no-remat", action="store_true", help="skip the step that recomputes each block")
    args = p.parse_args()

    if args.system_malloc:
        os.environ[HOST_MEMORY_OPT_OUT] = "1"  # read by `import jaxarena`
    from jaxarena import host_memory, make

    if not args.system_malloc:  # as `jaxarena-tune-coder train` runs, before JAX starts its threads
        host_memory.keep_freed_memory(one_arena=True)
    from jaxarena.coder.language import BASELINES, reference_text
    from jaxarena.coder.prompts import coder_system, task_information
    from jaxarena.coder.tuning import model as CM
    from jaxarena.coder.tuning.examples import Example, plan_text, tactic_of
    from jaxarena.coder.tuning.train import e_user
    from jaxarena.llm import lora as L
    from jaxarena.llm.generate import GGUFGenerator

    _, params = make("Arena-v0", scenario="paper")
    reference, task = reference_text(), task_information(params, "paper", 1000)
    model = CM.CoderModel(GGUFGenerator(max_new_tokens=8), coder_system(reference, task))
    source = BASELINES[args.baseline]
    example = Example(args.baseline, args.baseline, plan_text(*tactic_of(source), [], {}), source)
    batch = model.batch([(e_user(example, reference, task), example.reply)] * args.batch)
    lora = L.LoraConfig(rank=args.rank)
    adapter = L.init_adapter(model.cfg, lora, jax.random.key(0))
    pre = model.prefix_arrays()
    tokens = int(batch.valid.sum())
    base = {"prefix_tokens": model.prefix.length, "suffix_tokens": tokens, "reply_tokens": int(batch.reply.sum())}

    def loss(a, base, b, remat):
        lp = CM._reply_log_probs(model.cfg, base, a, *pre, b, lora=lora, remat=remat)
        return -lp.sum() / b.reply.sum()

    opt = optax.adam(1e-3)
    state = opt.init(adapter)

    def make_step(remat):
        @jax.jit
        def step(a, s, base, b):
            value, g = jax.value_and_grad(loss)(a, base, b, remat)
            updates, s = opt.update(g, s, a)
            return optax.apply_updates(a, updates), s, value

        return lambda: step(adapter, state, model.base, batch)

    forward = jax.jit(lambda a, base, b: loss(a, base, b, False))
    programs = {"forward": lambda: forward(adapter, model.base, batch), "step": make_step(False)}
    if not args.no_remat:
        programs["step_remat"] = make_step(True)
    best = {name: timed(fn, args.repeats) for name, fn in programs.items()}
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    allocator = "system" if args.system_malloc else "kept"
    for name, t in best.items():
        line = {"line": name, "batch": args.batch, "malloc": allocator, **base, "s": round(t, 3)}
        print(json.dumps(line), flush=True)
    f = best["forward"]
    summary = {"summary": True, "batch": args.batch, "malloc": allocator, "peak_rss_gb": round(peak_gb, 1)}
    summary["backward_over_forward"] = round((best["step"] - f) / f, 2)
    if "step_remat" in best:
        summary["backward_over_forward_remat"] = round((best["step_remat"] - f) / f, 2)
        summary["remat_cost"] = round(best["step_remat"] / best["step"], 2)
    summary["samples_per_s"] = round(args.batch / best["step"], 3)
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
