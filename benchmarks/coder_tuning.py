"""The coder's tuning step against its forward pass, in one run (`jaxarena.coder.tuning`).

    python benchmarks/coder_tuning.py               # SmolLM2-135M, the coder's real 2.6 k-token system prompt

Lines (JSON): the forward over one reply's suffix (log-probs of its tokens,
attending to the base model's prefix cache), the SFT step with each block
recomputed in the backward (`remat`, what training runs), and the same step
keeping every activation (`keep`, with its peak resident memory reported by
the process). The summary gives `backward_over_forward`: (step - forward) /
forward for the step training runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax
import numpy as np
import optax


def timed(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--baseline", default="surround_strike", help="the reply: a white-box baseline's program")
    p.add_argument("--no-keep", action="store_true", help="skip the step that keeps every activation (~10 GB)")
    args = p.parse_args()

    from jaxarena import make
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
    batch = model.batch([(e_user(example, reference, task), example.reply)])
    lora = L.LoraConfig(rank=args.rank)
    adapter = L.init_adapter(model.cfg, lora, jax.random.key(0))
    pre = model.prefix_arrays()
    tokens = int(batch.valid.sum())
    base = {"prefix_tokens": model.prefix.length, "suffix_tokens": tokens, "reply_tokens": int(batch.reply.sum())}

    def loss(a, b, remat):
        lp = CM._reply_log_probs(model.cfg, model.base, a, *pre, b, lora=lora, remat=remat)
        return -lp.sum() / b.reply.sum()

    forward = jax.jit(lambda a, b: loss(a, b, True))
    t_fwd = timed(lambda: forward(adapter, batch), args.repeats)
    print(json.dumps({"line": "forward", **base, "s": round(t_fwd, 3)}), flush=True)
    opt = optax.adam(1e-3)
    state = opt.init(adapter)
    results = {}
    for remat in (True,) if args.no_keep else (True, False):

        @jax.jit
        def step(a, s, b, remat=remat):
            value, g = jax.value_and_grad(loss)(a, b, remat)
            updates, s = opt.update(g, s, a)
            return optax.apply_updates(a, updates), s, value

        t = timed(lambda step=step: step(adapter, state, batch), args.repeats)
        results[remat] = t
        peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        line = {"line": "sft_step", "remat": remat, **base, "s": round(t, 3), "over_forward": round(t / t_fwd, 2)}
        print(json.dumps({**line, "peak_rss_gb_so_far": round(peak_gb, 1)}), flush=True)
    summary = {
        "summary": True,
        "forward_s": round(t_fwd, 3),
        "sft_step_s": round(results[True], 3),
        "backward_over_forward": round((results[True] - t_fwd) / t_fwd, 2),
        "remat_cost": round(results[True] / results[False], 2) if False in results else None,
        "samples_per_s": round(1 / results[True], 3),
    }
    print(json.dumps(summary), flush=True)
    return np.isfinite(results[True])


if __name__ == "__main__":
    main()
