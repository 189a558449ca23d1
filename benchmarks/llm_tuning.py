"""Tag-model tuning throughput: SFT and DPO samples/s and GRPO states/s against the forward-only rate.

Prints one JSON line each, all measured in the same run on the embedded SmolLM2:

  forward      option logits of `--batch` states under a LoRA adapter (the
               prefix's KV cache recomputed, as training does): states/s;
  sft, dpo     one optimiser step on `--batch` states (SFT) or pairs (DPO):
               samples/s and `backward_over_forward`, the step's time over the
               forward's minus one (what the backward and update add, in forwards);
  grpo         one whole GRPO step on raid with B-obey-raid (`--grpo-episodes`
               episodes played under the adapter, `--batch` states, `--group`
               playouts each, `inner_steps` updates): states/s, and its seconds
               beside the forward's (`grpo_over_forward`).

    python benchmarks/llm_tuning.py                      # CPU defaults
    python benchmarks/llm_tuning.py --batch 256 --grpo-episodes 512 --group 16   # a GPU

Each figure is the median of `--repeats` timed calls after one warm-up call.
On a GPU the same script runs as is (pass larger sizes). `loadavg_1m` is
printed: on a shared machine the rates drop with other load, the ratios less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax


def timed(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile and warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--targets", nargs="+", default=["q", "v"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--grpo-episodes", type=int, default=32)
    p.add_argument("--no-grpo", action="store_true", help="skip the GRPO line (it plays raid episodes)")
    args = p.parse_args()

    import jaxarena
    from jaxarena.llm.lora import LoraConfig
    from jaxarena.llm.tuning import losses
    from jaxarena.llm.tuning.model import TagModel, option_logits

    _, raid = jaxarena.make(scenario="raid")
    lora = LoraConfig(rank=args.rank, targets=tuple(args.targets))
    model = TagModel.load(limits={"bot_max_hp": float(raid.bot_hp), "npc_max_hp": float(raid.npc_hp)}, lora=lora)
    rng = np.random.default_rng(0)
    features = jnp.asarray(rng.uniform(0, 1, (args.batch, 5)) * np.array([690, 60, 5, 1, 40]), jnp.float32)
    q = jnp.asarray(rng.uniform(0, 1, (args.batch, 4)), jnp.float32)
    adapter = jax.tree.map(lambda x: x + 0.01, model.zero_adapter())  # nonzero B: a realistic backward
    base = model.base
    logits_of = jax.tree_util.Partial(option_logits, model.source, lora)
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(adapter)
    common = {"batch": args.batch, "rank": args.rank, "targets": args.targets, "backend": jax.default_backend()}

    forward = jax.jit(lambda b, a, f: logits_of(b, a, f))
    fwd_s = timed(lambda: forward(base, adapter, features), args.repeats)
    print(
        json.dumps(
            {
                "bench": "llm_tuning",
                "line": "forward",
                **common,
                "seconds": round(fwd_s, 3),
                "states_per_s": round(args.batch / fwd_s, 1),
                "loadavg_1m": os.getloadavg()[0],
            }
        ),
        flush=True,
    )

    def make_step(loss):
        @jax.jit
        def step(a, o, b, f):
            value, grads = jax.value_and_grad(loss)(a, b, f)
            updates, o = optimizer.update(grads, o, a)
            return optax.apply_updates(a, updates), o, value

        return step

    ref = jax.lax.stop_gradient(forward(base, adapter, features))
    better, worse = jnp.zeros(args.batch, jnp.int32), jnp.ones(args.batch, jnp.int32)
    methods = {
        "sft": lambda a, b, f: losses.sft_loss(logits_of(b, a, f), q, 0.05),
        "dpo": lambda a, b, f: losses.dpo_loss(logits_of(b, a, f), ref, better, worse, 0.5),
    }
    for name, loss in methods.items():
        step = make_step(loss)
        s = timed(lambda step=step: step(adapter, opt_state, base, features), args.repeats)
        print(
            json.dumps(
                {
                    "bench": "llm_tuning",
                    "line": name,
                    **common,
                    "seconds": round(s, 3),
                    "samples_per_s": round(args.batch / s, 1),
                    "backward_over_forward": round(s / fwd_s - 1, 2),
                    "loadavg_1m": os.getloadavg()[0],
                }
            ),
            flush=True,
        )

    if args.no_grpo:
        return
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.llm.tuning.grpo import GRPOConfig, make_grpo_step
    from jaxarena.llm.tuning.train import grpo_key
    from jaxarena.protocol.policies import policy_env_id

    policy, policy_params = load_policy("B-obey-raid")
    env, params = jaxarena.make(policy_env_id(policy), bot="balanced", scenario="raid")
    config = GRPOConfig(episodes=args.grpo_episodes, states=args.batch, group=args.group)
    grpo, grpo_opt = make_grpo_step(env, params, policy, model, config)
    g_state = grpo_opt.init(adapter)
    s = timed(lambda: grpo(adapter, g_state, base, policy_params, params, grpo_key(0)), args.repeats)
    print(
        json.dumps(
            {
                "bench": "llm_tuning",
                "line": "grpo",
                **common,
                "episodes": args.grpo_episodes,
                "group": args.group,
                "inner_steps": config.inner_steps,
                "seconds": round(s, 3),
                "states_per_s": round(args.batch / s, 2),
                "grpo_over_forward": round(s / fwd_s, 1),
                "loadavg_1m": os.getloadavg()[0],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
