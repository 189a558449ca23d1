"""SFT, then GRPO, of the coder's LoRA adapter: the pipeline of *SMAC-R1: The Emergence of Intelligence in
Decision-Making Tasks* on the squad-policy language.

    config = CoderTuneConfig(method="sft", steps=30)
    train_coder(config, model, train, held, "runs/coder-sft", reference=reference, task=task)
    config = CoderTuneConfig(method="grpo", steps=8, init_from="runs/coder-sft/adapter")
    train_coder(config, model, train, held, "runs/coder-grpo", reference=reference, task=task)

(`train, held` from `examples.build_examples`; `jaxarena-tune-coder train` does all of it.)

- **SFT** maximises the log-probability of the reference reply (one
  ```python block and the end of the turn) given the loop's coder prompt, on
  the training examples (`examples`: baselines and filtered variants, each
  with its plan). Each step draws `batch` examples from a permutation keyed
  by the seed (`draw_seed` when given) and the epoch, so a resumed run draws the same ones. Held-out
  NLL per reply token is logged every `eval_every` steps.
- **GRPO** samples a group of `group` replies per training plan from the
  current adapter (the loop's prompt, candidates 1..G, at `temperature`),
  scores each as the loop does (`score_sources`: -1 no code, -0.5 refused,
  else the win rate over `episodes_per_bot` episodes per bot), and takes one
  Adam step on -A_i * (mean log-probability of reply i's tokens, under the
  sampler that wrote them: the model's top-k, then top-p, at the sampling
  temperature, renormalised) plus
  `kl_coef` times the exact KL, over the whole vocabulary at each reply
  position, to the run's starting model (`init_from`, else the base model).
  A_i is the reward's group-relative advantage. With one step per group the
  sampling and current models are the same, so the clipped ratio of the tag
  model's GRPO is 1 and is left out.

Each run writes `metrics.jsonl`, `curves.png` and an atomic checkpoint after
every logged step; rerunning the command resumes from it. The adapter ends in
`<out>/adapter` with a card that says it acts after the shared prefix.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxarena.files import write_atomic
from jaxarena.llm import lora as L
from jaxarena.llm.tuning.losses import group_advantages
from jaxarena.llm.tuning.train import load_checkpoint, save_checkpoint, write_curves

from ..extract import extract_code
from ..loop_config import CODER_TOP_P
from ..score_types import ScoreConfig
from ..scoring import score_sources
from .evaluate import coder_prompts
from .examples import Example
from .model import CoderModel

METHODS = ("sft", "grpo")


@dataclasses.dataclass(frozen=True)
class CoderTuneConfig:
    """One coder tuning run; see the module docstring and `jaxarena-tune-coder train --help`."""

    method: str = "sft"
    steps: int = 60
    batch: int = 2
    lr: float = 1e-3
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = L.TARGETS
    eval_every: int = 10
    seed: int = 0
    # The draws (a fresh adapter's init, plan order, GRPO's replies and their scoring episodes) when not
    # `seed`'s: a replicate run on the same split, whose held-out plans `seed` fixes.
    draw_seed: int | None = None
    scenario: str = "paper"
    init_from: str | None = None
    held_out: float = 0.25  # the share of the variants kept out of training (`examples.split`)
    filter_episodes: int = 100  # episodes per bot when the training variants are filtered
    # GRPO only: replies per plan, the KL weight, reply length, sampling temperature, episodes per bot.
    group: int = 4
    kl_coef: float = 0.05
    max_new_tokens: int = 448
    temperature: float = 0.7
    episodes_per_bot: int = 50

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        if not 0.0 <= self.held_out < 1.0:
            raise ValueError(f"held_out must be in [0, 1), got {self.held_out}")
        for name in ("steps", "batch", "eval_every", "group", "max_new_tokens", "episodes_per_bot", "filter_episodes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.method == "grpo" and not self.temperature > 0:  # its log-probs divide the logits by it
            raise ValueError(f"GRPO's temperature must be > 0, got {self.temperature}")
        for name in ("seed", "draw_seed"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.method == "grpo" and self.group < 2:
            raise ValueError("GRPO needs a group of at least 2 replies per plan")
        object.__setattr__(self, "targets", tuple(self.targets))

    @property
    def lora(self) -> L.LoraConfig:
        return L.LoraConfig(rank=self.rank, alpha=self.alpha, targets=self.targets)

    @property
    def draws(self) -> int:
        """The seed of the run's draws: `draw_seed`, else `seed`."""
        return self.seed if self.draw_seed is None else self.draw_seed

    def to_json(self) -> dict:
        record = {**dataclasses.asdict(self), "targets": list(self.targets)}
        if self.draw_seed is None:  # as runs recorded before the field existed, so they resume
            del record["draw_seed"]
        return record


def sft_loss(model: CoderModel, lora: L.LoraConfig, adapter, base, prefix, batch) -> jax.Array:
    """Mean negative log-probability per reply token; `prefix` is `CoderModel.prefix_arrays()`."""
    lp = model._log_probs(base, adapter, *prefix, batch, lora=lora)
    return -lp.sum() / jnp.maximum(batch.reply.sum(), 1)


def grpo_loss(
    model, lora, kl_coef, adapter, base, prefix, batch, advantages, ref_logp, temperature=1.0
) -> tuple[jax.Array, dict]:
    """-A_i * mean log-prob of reply i, plus kl_coef * the exact per-token KL to the reference, averaged.

    The log-probs are the sampler's (top-k, then top-p at `CODER_TOP_P`, at `temperature`), the policy
    that wrote the replies; the KL is over the whole vocabulary.
    """
    sampler = (model.generator.top_k, CODER_TOP_P)
    lp, logp = model._log_probs(
        base, adapter, *prefix, batch, lora=lora, with_logits=True, temperature=temperature, sampler=sampler
    )
    mask = jnp.asarray(batch.reply)
    n = jnp.maximum(mask.sum(-1), 1)
    mean_lp = lp.sum(-1) / n
    kl_tok = jnp.sum(jnp.exp(logp) * (logp - ref_logp), axis=-1)  # (B, S) exact KL over the vocabulary
    kl = jnp.where(mask, kl_tok, 0.0).sum(-1) / n
    loss = jnp.mean(-advantages * mean_lp + kl_coef * kl)
    return loss, {"kl": kl.mean()}


def _plot(out: Path, history: list, method: str) -> None:
    keys = (
        [("loss", "train NLL per reply token"), ("eval_nll", "held-out NLL per reply token")]
        if method == "sft"
        else [("mean_reward", "mean reward of the group"), ("compiled", "share that ran"), ("kl", "KL to the start")]
    )
    panels = []
    for key, label in keys:
        points = [(h["step"], h[key]) for h in history if key in h]
        panels.append((label, [p[0] for p in points], [p[1] for p in points]))
    write_curves(out, panels, f"coder fine-tuning ({method.upper()})")


def _draw(n: int, batch: int, step: int, seed: int) -> np.ndarray:
    """Example indices for `step`: consecutive slices of one permutation per epoch, keyed by seed and epoch."""
    per_epoch = max(n // batch, 1)
    epoch, slot = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[slot * batch : slot * batch + batch]


def train_coder(
    config: CoderTuneConfig,
    model: CoderModel,
    train_examples: list[Example],
    held_out: list[Example],
    out: str | os.PathLike,
    *,
    reference: str,
    task: str,
    progress: Callable[[str], None] = print,
) -> Path:
    """Run (or resume) `config` in `out`; returns the saved adapter's directory."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = adapter = _start_adapter(config, model)
    optimizer = optax.adam(config.lr)
    opt_state = optimizer.init(adapter)
    step, history = 0, []
    resumed = load_checkpoint(out, (adapter, opt_state), config)
    if resumed is not None:
        step, (adapter, opt_state), history = resumed
        progress(f"resuming {out} at step {step}")

    @jax.jit
    def apply(a, s, g):
        updates, s = optimizer.update(g, s, a)
        return optax.apply_updates(a, updates), s

    if not train_examples:
        raise ValueError("no training examples: the filter kept none, or --held-out keeps them all out")
    make = _sft_method if config.method == "sft" else _grpo_method
    run_step, evaluate = make(config, model, train_examples, held_out, reference, task, apply, start)
    if not history:
        history.append({"step": 0, **evaluate(adapter)})
    t0, since = time.perf_counter(), []
    while step < config.steps:
        adapter, opt_state, stats = run_step(adapter, opt_state, step)
        since.append(stats)
        step += 1
        if step % config.eval_every == 0 or step == config.steps:
            keys = sorted(set().union(*since))
            entry = {"step": step, **{k: float(np.mean([s[k] for s in since if k in s])) for k in keys}}
            entry.update(evaluate(adapter))
            since = []
            history.append(entry)
            save_checkpoint(out, step, adapter, opt_state, history, config)
            write_atomic(out / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in history))
            _plot(out, history, config.method)
            shown = "  ".join(f"{k} {v:.3f}" for k, v in entry.items() if k != "step")
            progress(f"step {step}/{config.steps}  {shown}  ({time.perf_counter() - t0:.0f} s)")
    card = {
        "kind": "coder-adapter",
        "acts_on": L.AFTER_PREFIX,
        "method": config.method,
        "config": config.to_json(),
        # The rule GRPO's groups were drawn with, and its log-probs taken under.
        **({"sampler": {"top_k": model.generator.top_k, "top_p": CODER_TOP_P}} if config.method == "grpo" else {}),
        "steps": step,
        "examples": {"train": [e.name for e in train_examples], "held_out": [e.name for e in held_out]},
        "history": history,
    }
    return L.save_adapter(out / "adapter", adapter, config.lora, base_sha256=model.generator.sha256, card=card)


def _start_adapter(config: CoderTuneConfig, model: CoderModel):
    """The adapter the run starts from: `init_from`'s (same rank and targets), or a zero one."""
    if not config.init_from:
        return L.init_adapter(model.cfg, config.lora, jax.random.key(config.draws))
    from jaxarena.llm.adapters import resolve_adapter

    directory = resolve_adapter(config.init_from, kind="coder-adapter")
    loaded = L.load_adapter(directory, model.cfg, model.generator.sha256)
    if loaded.lora != config.lora:
        raise ValueError(f"--init-from adapter has LoRA config {loaded.lora}, the run {config.lora}")
    return loaded.adapter


def _sft_method(config, model, train_examples, held_out, reference, task, apply, start):
    """(step, evaluate) for SFT: a drawn batch of examples per step; held-out NLL per reply token."""
    lora, prefix = config.lora, model.prefix_arrays()
    grad = jax.jit(jax.value_and_grad(lambda a, base, pre, b: sft_loss(model, lora, a, base, pre, b)))
    nll = jax.jit(lambda a, base, pre, b: sft_loss(model, lora, a, base, pre, b))
    held_batches = [model.batch([(e_user(e, reference, task), e.reply)]) for e in held_out]

    def run_step(adapter, opt_state, step):
        idx = _draw(len(train_examples), config.batch, step, config.draws)
        batch = model.batch([(e_user(train_examples[i], reference, task), train_examples[i].reply) for i in idx])
        loss, g = grad(adapter, model.base, prefix, batch)
        adapter, opt_state = apply(adapter, opt_state, g)
        return adapter, opt_state, {"loss": float(loss)}

    def evaluate(adapter):
        values = [float(nll(adapter, model.base, prefix, b)) for b in held_batches]
        return {"eval_nll": float(np.mean(values)) if values else 0.0}

    return run_step, evaluate


def _grpo_method(config, model, train_examples, held_out, reference, task, apply, start):
    """(step, evaluate) for GRPO: a sampled, scored group per step; its statistics are the curve.

    `start` is the adapter the run began from (loaded once by `train_coder`), the KL's reference.
    """
    lora, prefix = config.lora, model.prefix_arrays()
    grad = jax.jit(
        jax.value_and_grad(
            lambda a, base, pre, b, adv, ref: grpo_loss(
                model, lora, config.kl_coef, a, base, pre, b, adv, ref, config.temperature
            ),
            has_aux=True,
        )
    )
    # The reference is where the run started (the SFT adapter for GRPO after SFT): the KL keeps what SFT taught,
    # where a KL to the stock model would pull back towards replies that do not compile.
    reference_adapter = start
    t = config.temperature  # the reference's full softmax at the sampling temperature, for the exact KL
    ref_logp = jax.jit(
        lambda ref, base, pre, b: model._log_probs(base, ref, *pre, b, lora=lora, with_logits=True, temperature=t)[1]
    )
    cache: dict = {}

    def run_step(adapter, opt_state, step):
        record = _grpo_step(config, model, lora, adapter, train_examples, step, reference, task, cache)
        if not record["pairs"]:
            return adapter, opt_state, record["stats"]
        # One reply at a time, gradients summed: a whole group's activations do not fit in memory.
        total, losses, kls = None, [], []
        for pair, advantage in zip(record["pairs"], record["advantages"], strict=True):
            batch = model.batch([pair], append_end=False)
            ref = ref_logp(reference_adapter, model.base, prefix, batch)
            (loss, aux), g = grad(adapter, model.base, prefix, batch, jnp.asarray([advantage]), ref)
            total = g if total is None else jax.tree.map(jnp.add, total, g)
            losses.append(float(loss))
            kls.append(float(aux["kl"]))
        n = len(record["pairs"])
        adapter, opt_state = apply(adapter, opt_state, jax.tree.map(lambda x: x / n, total))
        return adapter, opt_state, {**record["stats"], "loss": float(np.mean(losses)), "kl": float(np.mean(kls))}

    return run_step, lambda adapter: {}


def e_user(example: Example, reference: str, task: str, candidate: int = 1, candidates: int = 1) -> str:
    """The loop's coder prompt's user turn for `example`'s plan."""
    (prompt,) = coder_prompts(reference, task, [example.plan], candidates)[candidate - 1 : candidate]
    return prompt.user


def _grpo_step(config, model, lora, adapter, examples, step, reference, task, cache) -> dict:
    """Sample a group for one training plan with the current adapter, score it, and build the update's batch."""
    (i,) = _draw(len(examples), 1, step, config.draws)
    prompts = coder_prompts(reference, task, [examples[i].plan], config.group)
    gen = model.generator
    gen.use_adapter(adapter, lora, after_prefix=True)
    seed = gen.seed
    gen.seed = config.draws * 100_003 + step  # a fresh draw per step, the same on resume
    try:
        replies = gen.generate([(p.system, p.user) for p in prompts], temperature=config.temperature, top_p=CODER_TOP_P)
    finally:
        gen.use_adapter(None)
        gen.seed = seed
    failed = [r.error for r in replies if r.error]
    if failed:
        raise ValueError(f"the coder could not answer {len(failed)} of {len(replies)} prompts: {failed[0]}")
    score_config = ScoreConfig(episodes_per_bot=config.episodes_per_bot, scenario=config.scenario, seed=config.draws)
    scores = score_sources([extract_code(r.text) for r in replies], score_config, cache)
    rewards = np.array([s.reward for s in scores], np.float32)
    stats = {
        "mean_reward": float(rewards.mean()),
        "max_reward": float(rewards.max()),
        "compiled": float(np.mean([s.status == "ok" for s in scores])),
        "with_code": float(np.mean([s.status != "no_code" for s in scores])),
    }
    if np.all(rewards == rewards[0]):  # no advantage: nothing to learn from this group
        return {"pairs": [], "stats": stats}
    # A reply is trained on the tokens it drew, the stop token included; one cut at the token limit has none.
    pairs = [
        (p.user, list(r.token_ids) + ([r.stop_id] if r.stop_id is not None else []))
        for p, r in zip(prompts, replies, strict=True)
    ]
    advantages = np.asarray(group_advantages(jnp.asarray(rewards[None])))[0]
    return {"pairs": pairs, "advantages": advantages.tolist(), "stats": stats}
