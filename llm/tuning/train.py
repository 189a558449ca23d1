"""One trainer for the tag model's LoRA adapter: SFT, DPO or GRPO, scored on held-out priced decisions.

    config = TrainConfig(method="sft", data="runs/raid-data", steps=150)
    train(config, TagModel.load(limits=...), load_split(data, "train"), load_split(data, "eval"), "runs/raid-sft")

SFT and DPO draw a batch of training states (or tag pairs) each step; the
draw depends only on the seed and the step, so a resumed run takes the same
batches. GRPO plays instead (`grpo`): each step is one compiled program of
rollout, playouts and update, keyed by the seed and the step. Every
`eval_every` steps the trainer scores held-out states
(`metrics.choice_metrics`: regret, agreement with the oracle, entropy, tag
shares), appends a line to `metrics.jsonl`, redraws `curves.png` and writes
a checkpoint (adapter, optimizer state, step) atomically. Run the same
command again after a crash or a SIGKILL: it resumes from the last
checkpoint and ends with the same adapter, bit for bit, as an uninterrupted
run. A larger `--steps` extends a finished run.

The run ends by saving the adapter (`adapter/`, see `lora.save_adapter`) with
a card holding the method, data, steps and the held-out metrics of the stock
model and the tuned one, per bot.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxarena.algorithms.checkpoint import CHECKPOINT_DIR, Checkpointer
from jaxarena.config_files import config_from
from jaxarena.files import write_atomic
from jaxarena.key_streams import GRPO_STREAM
from jaxarena.names import BOT_TYPES

from ..lora import LoraConfig, save_adapter
from . import losses
from .data import Decisions
from .metrics import by_group, choice_metrics
from .model import TagModel, option_logits

METHODS = ("sft", "dpo", "grpo")
#: The file an earlier version kept a tuning run's state in; such a run's adapter loads, it does not resume.
OLD_CHECKPOINT = "checkpoint.npz"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A tuning run; see the module docstring and `jaxarena-tune-llm train --help`."""

    method: str = "sft"
    data: str = ""
    steps: int = 150
    batch: int = 32
    lr: float = 2e-3
    tau: float = 0.05
    beta: float = 0.5
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q", "v")
    eval_every: int = 25
    eval_states: int = 256
    seed: int = 0
    # GRPO only: episodes played per step, tags drawn per state, Adam steps per group, and the objective.
    episodes: int = 32
    group: int = 8
    inner_steps: int = 2
    clip_eps: float = 0.2
    kl_coef: float = 0.02
    init_from: str | None = None  # the adapter the run started from (None: a zero adapter)
    # SFT only: learn the choices of a small chooser fit to the oracle's values on the prompt's five numbers
    # ("logistic" or "mlp", `bound.fit_chooser`) instead of the values themselves; None: the values.
    teacher: str | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        for name in ("steps", "batch", "eval_every", "eval_states"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        object.__setattr__(self, "targets", tuple(self.targets))

    @property
    def lora(self) -> LoraConfig:
        return LoraConfig(rank=self.rank, alpha=self.alpha, targets=self.targets)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "targets": list(self.targets)}


def separated_pairs(win: np.ndarray, rollouts: int, z: float = 1.96) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DPO pairs (state, better, worse): tags whose win rates differ by more than z combined binomial SEs.

    The SE of a win rate p from K playouts is sqrt(p (1 - p) / K), floored at
    that of one playout in K (1/K's), so 8/8 against 7/8 is not "separated".
    """
    se = np.sqrt(np.maximum(win * (1 - win), (1 - 1 / rollouts) / rollouts) / rollouts)
    states, better, worse = [], [], []
    for i in range(4):
        for j in range(4):
            sep = win[:, i] - win[:, j] > z * np.sqrt(se[:, i] ** 2 + se[:, j] ** 2)
            idx = np.nonzero(sep)[0]
            states.append(idx)
            better.append(np.full(len(idx), i))
            worse.append(np.full(len(idx), j))
    order = np.argsort(np.concatenate(states), kind="stable")
    return tuple(np.concatenate(x)[order].astype(np.int32) for x in (states, better, worse))


def _loss_fn(model: TagModel, config: TrainConfig):
    """loss(adapter, base, batch) -> scalar for the configured method."""
    logits_of = partial(option_logits, model.source, config.lora)

    def sft(adapter, base, batch):
        return losses.sft_loss(logits_of(base, adapter, batch["features"]), batch["win"], config.tau)

    def dpo(adapter, base, batch):
        logits = logits_of(base, adapter, batch["features"])
        return losses.dpo_loss(logits, batch["ref_logits"], batch["better"], batch["worse"], config.beta)

    return {"sft": sft, "dpo": dpo}[config.method]


def bytes_of(write: Callable) -> bytes:
    """What `write(file)` writes, as bytes (for `write_atomic`)."""
    buffer = io.BytesIO()
    write(buffer)
    return buffer.getvalue()


def save_checkpoint(out: Path, step: int, adapter, opt_state, history: list, config) -> None:
    """The run's state as the training driver saves every trainer's (`algorithms.checkpoint.Checkpointer`,
    orbax, atomic): adapter and optimizer state, with the step, the history and the config beside them."""
    checkpointer = Checkpointer(out, save_config=False)
    checkpointer.save([adapter, opt_state], step, meta={"history": history, "config": config.to_json()})
    checkpointer.close()


def load_checkpoint(out: Path, like, config):
    """(step, (adapter, opt_state), history) from `out`'s newest checkpoint, or None if there is none."""
    if (out / OLD_CHECKPOINT).exists() and not (out / CHECKPOINT_DIR).exists():
        raise ValueError(
            f"{out} holds a checkpoint of an earlier version ({OLD_CHECKPOINT}), which cannot be resumed: "
            "its saved adapter still loads; use a new --out directory to train again"
        )
    checkpointer = Checkpointer(out, save_config=False)
    try:
        step = checkpointer.latest_step()
        if step is None:
            return None
        meta = checkpointer.meta(step)
        # The step budget may grow between runs (train longer); everything else must match.
        if {**meta["config"], "steps": 0} != {**config.to_json(), "steps": 0}:
            raise ValueError(f"{out} holds a run with another config ({meta['config']}); use a new --out directory")
        adapter, opt_state = checkpointer.restore(list(like), step)
    finally:
        checkpointer.close()
    return step, (adapter, opt_state), meta["history"]


def write_curves(out: Path, panels: list[tuple[str, list, list]], title: str) -> None:
    """`out/curves.png`: one panel per (title, steps, values), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (label, xs, ys) in zip(np.atleast_1d(axes), panels, strict=True):
        ax.plot(xs, ys, marker="o")
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    write_atomic(out / "curves.png", bytes_of(lambda f: fig.savefig(f, format="png", dpi=110)))
    plt.close(fig)


def _plot(out: Path, history: list, method: str) -> None:
    steps = [h["step"] for h in history]
    panels = [
        (label, steps, [h["eval"][key] for h in history])
        for key, label in (
            ("regret", "held-out regret (win prob.)"),
            ("agreement", "agreement with the oracle"),
            ("entropy_bits", "tag entropy (bits)"),
        )
    ]
    write_curves(out, panels, f"tag model fine-tuning ({method.upper()})")


def eval_indices(n: int, count: int) -> np.ndarray:
    """Evenly spread held-out states scored during training (the full split is scored at the end)."""
    return np.unique(np.linspace(0, n - 1, min(count, n)).round().astype(int))


def train(
    config: TrainConfig,
    model: TagModel,
    train_data: Decisions | None,
    eval_data: Decisions,
    out: str | os.PathLike,
    *,
    progress: Callable[[str], None] = print,
) -> Path:
    """Run (or resume) `config` in directory `out`; returns the saved adapter's directory.

    SFT and DPO learn from `train_data`; GRPO plays the scenario and policy
    the dataset was built with and ignores `train_data`. All three are scored
    on `eval_data`.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config.to_json(), indent=2, sort_keys=True))
    if model.lora != config.lora:
        raise ValueError(f"the model's LoRA config {model.lora} is not the run's {config.lora}")
    step_fn, opt_state = (_online_step if config.method == "grpo" else _offline_step)(config, model, train_data)
    adapter = model.adapter
    held = eval_indices(len(eval_data), config.eval_states)
    step, history = 0, []
    resumed = load_checkpoint(out, (adapter, opt_state), config)
    if resumed is not None:
        step, (adapter, opt_state), history = resumed
        progress(f"resuming {out} at step {step}")
    else:
        # Step 0 is where the run starts: the stock model, or the adapter of --init-from.
        start = choice_metrics(model.probs(eval_data.features[held], adapter), eval_data.win[held])
        history.append(_record(0, {}, start))
    t0, since = time.perf_counter(), []
    while step < config.steps:
        adapter, opt_state, stats = step_fn(adapter, opt_state, step)
        step += 1
        since.append(jax.device_get(stats))
        if step % config.eval_every == 0 or step == config.steps:
            metrics = choice_metrics(model.probs(eval_data.features[held], adapter), eval_data.win[held])
            history.append(_record(step, _mean_stats(since), metrics))
            since = []
            save_checkpoint(out, step, adapter, opt_state, history, config)
            _write_history(out, history)
            _plot(out, history, config.method)
            h = history[-1]
            progress(
                f"step {step}/{config.steps}  loss {h['train']['loss']:.4f}  held-out regret "
                f"{h['eval']['regret']:.3f} agreement {h['eval']['agreement']:.2f}  entropy "
                f"{h['eval']['entropy_bits']:.2f} bits  ({time.perf_counter() - t0:.0f} s)"
            )
    return _finish(config, model, adapter, eval_data, out, step, progress)


def _offline_step(config: TrainConfig, model: TagModel, data: Decisions):
    """SFT/DPO: `step(adapter, opt_state, i) -> (adapter, opt_state, stats)` on batch i of the data."""
    if data is None:
        raise ValueError(f"{config.method} learns from a dataset: pass the training split")
    loss_fn = _loss_fn(model, config)
    optimizer = optax.adam(config.lr)

    @jax.jit
    def update(adapter, opt_state, base, batch):
        loss, grads = jax.value_and_grad(loss_fn)(adapter, base, batch)
        updates, opt_state = optimizer.update(grads, opt_state, adapter)
        return optax.apply_updates(adapter, updates), opt_state, {"loss": loss}

    pool = _batch_pool(config, model, data)
    return (lambda ad, opt, i: update(ad, opt, model.base, _draw(pool, config, i))), optimizer.init(model.adapter)


def grpo_key(seed: int) -> jax.Array:
    """The root key of GRPO's training episodes under `seed` (step i plays `fold_in(root, i)`): the seed's
    key with `key_streams.GRPO_STREAM` folded in, apart from the dataset's and the protocol's keys."""
    return jax.random.fold_in(jax.random.key(seed), GRPO_STREAM)


def _online_step(config: TrainConfig, model: TagModel, data):
    """GRPO: `step(adapter, opt_state, i)` plays, scores and updates in one program (`grpo`)."""
    import jaxarena
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.protocol.policies import policy_env_id

    from .grpo import GRPOConfig, make_grpo_step

    data_config = json.loads((Path(config.data) / "config.json").read_text())
    policy, policy_params = load_policy(data_config["policy"])
    env_id = policy_env_id(policy)
    bots = data_config["bots"]
    env, params0 = jaxarena.make(env_id, bot=bots[0], scenario=data_config["scenario"])
    bot_params = [jaxarena.make(env_id, bot=b, scenario=data_config["scenario"])[1] for b in bots]
    grpo = config_from(GRPOConfig, config, states=config.batch)
    step, optimizer = make_grpo_step(env, params0, policy, model, grpo)
    key = grpo_key(config.seed)

    def run(adapter, opt_state, i):
        params = bot_params[i % len(bot_params)]
        return step(adapter, opt_state, model.base, policy_params, params, jax.random.fold_in(key, i))

    return run, optimizer.init(model.adapter)


def _mean_stats(stats: list) -> dict:
    return {k: np.mean([np.asarray(s[k]) for s in stats], axis=0).tolist() for k in stats[0]}


def _batch_pool(config: TrainConfig, model: TagModel, data: Decisions) -> dict:
    """What batches are drawn from: states (SFT) or separated pairs with reference logits (DPO)."""
    if config.method == "sft":
        return {"features": data.features, "win": _teacher_targets(config, model, data)}
    states, better, worse = separated_pairs(data.win, data.rollouts)
    if len(states) == 0:
        raise ValueError("no tag pairs in the training data differ by more than their CIs; price with more rollouts")
    ref = np.log(np.maximum(model.probs(data.features, model.zero_adapter()), 1e-30))
    return {"features": data.features[states], "ref_logits": ref[states], "better": better, "worse": worse}


TEACHERS = {"logistic": (), "mlp": (64, 64)}


def _teacher_targets(config: TrainConfig, model: TagModel, data: Decisions) -> np.ndarray:
    """SFT's values: the oracle's win rates, or a teacher's choices one-hot (see `TrainConfig.teacher`).

    The oracle's values are noisy (K playouts) and mostly favour one tag; a chooser fit to them on the
    same five numbers the prompt shows turns them into a consistent rule of the prompt, which is
    easier to learn and is, by construction, what the prompt can carry.
    """
    if config.teacher is None:
        return data.win
    if config.teacher not in TEACHERS:
        raise ValueError(f"unknown teacher {config.teacher!r}; choose from {', '.join(TEACHERS)}")
    from .bound import fit_chooser, prompt_inputs

    x = prompt_inputs(data.features, model.source.lines.limits)
    probs = fit_chooser(x, data.win, tau=config.tau, hidden=TEACHERS[config.teacher])(x)
    return np.eye(4, dtype=np.float32)[np.argmax(probs, axis=-1)]


def _draw(pool: dict, config: TrainConfig, step: int) -> dict:
    n = len(next(iter(pool.values())))
    rng = np.random.default_rng([config.seed, step])
    idx = rng.choice(n, size=config.batch, replace=n < config.batch)
    return {k: jnp.asarray(v[idx]) for k, v in pool.items()}


def _plain(metrics: dict) -> dict:
    """Metrics with arrays as lists, for JSON."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in metrics.items()}


def _record(step: int, train_stats: dict, metrics: dict) -> dict:
    return {"step": step, "train": train_stats, "eval": _plain(metrics)}


def _write_history(out: Path, history: list) -> None:
    text = "".join(json.dumps(h) + "\n" for h in history)
    write_atomic(out / "metrics.jsonl", text)


def _finish(config, model, adapter, eval_data, out, step, progress) -> Path:
    """Score the whole held-out split, stock and tuned, per bot, and save the adapter with its card."""
    stock_p = model.probs(eval_data.features, model.zero_adapter())
    tuned_p = model.probs(eval_data.features, adapter)

    def summary(p):
        per_bot = by_group(p, eval_data.win, eval_data.bot, BOT_TYPES)
        return _plain(choice_metrics(p, eval_data.win)) | {"by_bot": {b: _plain(m) for b, m in per_bot.items()}}

    data_config = json.loads((Path(config.data) / "config.json").read_text()) if config.data else {}
    card = {
        "method": config.method,
        "steps": step,
        "train_config": config.to_json(),
        "data": data_config,
        "held_out_states": len(eval_data),
        "held_out": {"stock": summary(stock_p), "tuned": summary(tuned_p)},
    }
    path = save_adapter(out / "adapter", adapter, config.lora, base_sha256=model.base_sha256, card=card)
    s, t = card["held_out"]["stock"], card["held_out"]["tuned"]
    progress(
        f"held-out ({len(eval_data)} states): regret {s['regret']:.3f} -> {t['regret']:.3f}, "
        f"agreement {s['agreement']:.2f} -> {t['agreement']:.2f}; adapter saved to {path}"
    )
    return path
