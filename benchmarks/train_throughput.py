"""PPO training throughput, with a split of where the time goes.

For the shipped recipe (the PPOConfig defaults) this measures, in the same
process and at the same batch size:

  env_only      a rollout of `num_steps` ticks with random actions
  env_forward   the same rollout driven by the policy network (forward pass,
                sampling, and the critic on final_obs), as PPO collects it
  full_update   complete PPO updates: rollout + GAE + all epochs/minibatches,
                once per `--presets` entry (default: the shipped recipe and the
                fast one), timed in alternation so load hits each alike

Each is compiled first (`.lower().compile()`, compile time reported
separately), then timed with `block_until_ready`. Throughput is env steps/s
(one 0.1 s tick of one whole 5-vs-1 arena); agent steps/s is x5. Prints one
JSON line per measurement, then a summary line (full-update env steps/s per
preset and their ratio).

    python benchmarks/train_throughput.py                 # YNNPACK fusions off (default)
    python benchmarks/train_throughput.py --both-flags    # measure with and without, in subprocesses
    python benchmarks/train_throughput.py --presets fast  # one recipe only
    python benchmarks/train_throughput.py --presets default --memory 64   # the squad with memory beside it

`--memory N` adds, for each preset, the same recipe with an N-unit GRU per NPC (`PPOConfig.memory`),
timed in the same rounds, and the summary gives its throughput over the preset's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=10, help="updates per timed call")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--num-steps", type=int, default=None)
    p.add_argument("--combination", default="A")
    p.add_argument("--presets", nargs="+", default=["default", "fast"], help="PPOConfig presets for full_update")
    p.add_argument("--ynn", choices=("off", "on"), default="off", help="off adds " + YNN_FLAG)
    p.add_argument("--both-flags", action="store_true", help="run once with each --ynn setting")
    p.add_argument("--memory", type=int, default=0, help="also time each preset with a GRU of this many units")
    return p.parse_args()


def main():
    args = parse()
    if args.both_flags:
        base = [a for a in sys.argv[1:] if a != "--both-flags"]
        for ynn in ("off", "on"):
            subprocess.run([sys.executable, __file__, *base, "--ynn", ynn], check=True)
        return
    if args.ynn == "off":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()

    import jax

    from jaxarena.algorithms import PPOConfig

    sizes = {k: v for k, v in (("num_envs", args.num_envs), ("num_steps", args.num_steps)) if v}
    cfg = PPOConfig(combination=args.combination, **sizes)
    common = {
        "ynn_fusions": args.ynn,
        "devices": f"{jax.device_count()}x{jax.devices()[0].platform}",
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_before": os.getloadavg()[0],
    }
    timer = Timer(args.repeats, common)
    measure_rollout(cfg, timer)
    configs = {name: PPOConfig.preset(name, combination=args.combination, **sizes) for name in args.presets}
    if args.memory:
        configs.update({f"{name}+gru": cfg.replace(memory=args.memory) for name, cfg in list(configs.items())})
    rates = measure_updates(configs, args.updates, timer)
    summary = {f"full_update_env_steps_per_s_{name}": rate for name, rate in rates.items()}
    for name in args.presets if args.memory else ():
        summary[f"{name}_gru_over_{name}"] = round(rates[f"{name}+gru"] / rates[name], 3)
    if "default" in rates and "fast" in rates:
        summary["fast_over_default"] = round(rates["fast"] / rates["default"], 3)
    print(json.dumps({"summary": summary, "load_after": os.getloadavg()[0], **common}), flush=True)


class Timer:
    """Compiles a program, then times its best of `repeats` calls and prints JSON lines."""

    def __init__(self, repeats: int, common: dict):
        self.repeats, self.common = repeats, common

    def compile(self, fn, *a):
        import jax

        t = time.perf_counter()
        compiled = jax.jit(fn).lower(*a).compile()
        compile_s = time.perf_counter() - t
        jax.block_until_ready(compiled(*a))  # warm-up
        return compiled, compile_s

    @staticmethod
    def once(compiled, *a) -> float:
        import jax

        t = time.perf_counter()
        jax.block_until_ready(compiled(*a))
        return time.perf_counter() - t

    def best(self, fn, *a):
        compiled, compile_s = self.compile(fn, *a)
        return compile_s, min(self.once(compiled, *a) for _ in range(self.repeats))

    def report(self, name, compile_s, seconds, env_steps, cfg, **extra):
        keys = ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden")
        row = dict(
            measure=name,
            env_steps_per_s=round(env_steps / seconds),
            agent_steps_per_s=round(5 * env_steps / seconds),
            seconds=round(seconds, 4),
            env_steps=env_steps,
            compile_s=round(compile_s, 2),
            config={k: cfg.to_dict()[k] for k in keys},
            **extra,
            **self.common,
        )
        print(json.dumps(row), flush=True)
        return row


def measure_rollout(cfg, timer: Timer):
    """env_only and env_forward at `cfg`'s batch size (the rollout half of an update)."""
    import jax
    import jax.numpy as jnp

    import jaxarena
    from jaxarena.algorithms import ActorCritic
    from jaxarena.key_streams import training_key

    n_envs, n_steps = cfg.num_envs, cfg.num_steps
    env, params = jaxarena.make("Arena-v0")
    bot_types = jnp.arange(n_envs) % 3
    v_step = jax.vmap(lambda k, s, a, bt: env.step(k, s, a, params.replace(bot_type=bt)))
    k_reset, k_net, key = jax.random.split(training_key(0), 3)  # PPO's stream, as a training run draws
    obs0, state0 = jax.vmap(lambda k, bt: env.reset(k, params.replace(bot_type=bt)))(
        jax.random.split(k_reset, n_envs), bot_types
    )
    net = ActorCritic(hidden=cfg.hidden, activation=cfg.activation)
    net_params = net.init(k_net, obs0)

    # 1. env only: random actions, keys split per step as PPO does.
    def env_only(state, key):
        def body(c, _):
            state, key, acc = c
            key, k_act, k_step = jax.random.split(key, 3)
            a = jax.random.randint(k_act, (n_envs, 5), 0, 6)
            obs, state, r, _d, info = v_step(jax.random.split(k_step, n_envs), state, a, bot_types)
            return (state, key, acc + jnp.sum(obs[..., ::7]) + jnp.sum(r) + jnp.sum(info["final_obs"][..., 2])), None

        return jax.lax.scan(body, (state, key, 0.0), None, n_steps)[0][2]

    # 2. env + the policy's forward pass, as PPO's rollout does it.
    def env_forward(p, obs, state, key):
        def body(c, _):
            obs, state, key, acc = c
            key, k_act, k_step = jax.random.split(key, 3)
            pi, v = net.apply(p, obs)
            a = pi.sample(seed=k_act)
            lp = pi.log_prob(a)
            obs, state, r, _d, info = v_step(jax.random.split(k_step, n_envs), state, a, bot_types)
            nv = net.apply(p, info["final_obs"], method=ActorCritic.value)
            return (obs, state, key, acc + jnp.sum(v) + jnp.sum(lp) + jnp.sum(nv) + jnp.sum(r)), None

        return jax.lax.scan(body, (obs, state, key, 0.0), None, n_steps)[0][3]

    timer.report("env_only", *timer.best(env_only, state0, key), n_envs * n_steps, cfg)
    timer.report("env_forward", *timer.best(env_forward, net_params, obs0, state0, key), n_envs * n_steps, cfg)


def measure_updates(configs: dict, updates: int, timer: Timer) -> dict[str, int]:
    """full_update of each config (the training program itself), timed in alternation: best of repeats each."""
    import jax

    from jaxarena.algorithms import make_trainer
    from jaxarena.key_streams import training_key

    programs = {}
    for name, cfg in configs.items():
        trainer = make_trainer(cfg)
        runner = jax.jit(trainer.init)(training_key(0))
        programs[name] = (*timer.compile(lambda r, t=trainer: t.run_updates(r, updates), runner), runner)
    best = {name: float("inf") for name in configs}
    for _ in range(timer.repeats):  # round-robin: a load spike hits one round of every config
        for name, (compiled, _c, runner) in programs.items():
            best[name] = min(best[name], timer.once(compiled, runner))
    rates = {}
    for name, cfg in configs.items():
        steps = updates * cfg.steps_per_update
        row = timer.report("full_update", programs[name][1], best[name], steps, cfg, preset=name)
        rates[name] = row["env_steps_per_s"]
    return rates


if __name__ == "__main__":
    main()
