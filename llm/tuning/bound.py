"""What the prompt's numbers can carry: small models fit to the same oracle targets as the LLM.

The LLM reads five numbers (Table 10's prompt); the oracle sees the whole
state. If a softmax regression or a small MLP on the same five numbers,
trained on the same soft targets softmax(Q / tau), chooses no better than the
tuned LLM, the limit is the prompt, not the model. Each is scored on the same
held-out states with `metrics.choice_metrics`.

Inputs are the five numbers as the prompt writes them (HP and distance
scaled to [0, 1]-ish by the prompt's maxima). The `+bot` variants add the
bot's identity (one-hot), which no player is told: how much a chooser would
gain from knowing its opponent.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxarena.names import BOT_TYPES

from .data import Decisions
from .losses import sft_loss
from .metrics import by_group, choice_metrics


def prompt_inputs(features: np.ndarray, limits: dict, bot: np.ndarray | None = None) -> np.ndarray:
    """The five numbers scaled by the prompt's maxima (and, with `bot`, its one-hot identity)."""
    f = np.asarray(features, np.float32)
    scaled = np.stack(
        [f[:, 0] / limits["bot_max_hp"], f[:, 1] / limits["npc_max_hp"], f[:, 2] / 5.0, f[:, 3], f[:, 4] / 42.4],
        axis=1,
    )
    if bot is None:
        return scaled
    return np.concatenate([scaled, np.eye(len(BOT_TYPES), dtype=np.float32)[bot]], axis=1)


def _init(key, sizes):
    layers = []
    shapes = list(zip(sizes[:-1], sizes[1:], strict=True))
    for k, (n_in, n_out) in zip(jax.random.split(key, len(shapes)), shapes, strict=True):
        layers.append({"w": jax.random.normal(k, (n_in, n_out)) * np.sqrt(2.0 / n_in), "b": jnp.zeros((n_out,))})
    layers[-1]["w"] = layers[-1]["w"] * 0.01  # start near uniform
    return layers


def _apply(layers, x):
    for layer in layers[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def _fit_params(x, q, *, tau: float, hidden=(), steps: int = 2000, lr: float = 3e-3, l2: float = 1e-4, seed: int = 0):
    """Weights of logits = f(x) fit to softmax(q / tau) by full-batch Adam (`hidden=()`: a softmax regression)."""
    x, q = jnp.asarray(x, jnp.float32), jnp.asarray(q, jnp.float32)
    params = _init(jax.random.key(seed), (x.shape[1], *hidden, 4))
    opt = optax.adam(lr)

    def loss(p):
        return sft_loss(_apply(p, x), q, tau) + l2 * sum(jnp.sum(layer["w"] ** 2) for layer in p)

    @jax.jit
    def fit(p):
        def step(carry, _):
            p, s = carry
            grads = jax.grad(loss)(p)
            updates, s = opt.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), None

        return jax.lax.scan(step, (p, opt.init(p)), None, length=steps)[0][0]

    return fit(params)


def fit_chooser(x, q, *, tau: float, hidden=(), **kwargs):
    """Fit a chooser on inputs `x` to the soft targets of `q`; returns `probs(x) -> (M, 4)`.

    `hidden=()` is a softmax regression; `hidden=(64, 64)` a small MLP.
    """
    fitted = _fit_params(x, q, tau=tau, hidden=hidden, **kwargs)
    return lambda inputs: np.asarray(jax.nn.softmax(_apply(fitted, jnp.asarray(inputs, jnp.float32)), -1))


def fit_tag_source(train: Decisions, limits: dict, *, tau: float, hidden=()):
    """A jittable tag source `fn(features, prev_tags, done, time_s, key) -> tags`: the argmax of a chooser
    fit on the prompt's five numbers. Played, it says what reading the prompt can win."""
    fitted = _fit_params(prompt_inputs(train.features, limits), train.win, tau=tau, hidden=hidden)
    scale = jnp.asarray([limits["bot_max_hp"], limits["npc_max_hp"], 5.0, 1.0, 42.4], jnp.float32)

    def tags(features, prev_tags, done, time_s, key):
        return jnp.argmax(_apply(fitted, features.astype(jnp.float32) / scale), axis=-1).astype(jnp.int32)

    return tags


def information_bound(train: Decisions, held_out: Decisions, limits: dict, *, tau: float) -> dict:
    """Held-out metrics (overall and per bot) of regression and MLP choosers, with and without the bot's identity."""
    results = {}
    for name, hidden in (("logistic", ()), ("mlp", (64, 64))):
        for with_bot in (False, True):
            x_train = prompt_inputs(train.features, limits, train.bot if with_bot else None)
            x_eval = prompt_inputs(held_out.features, limits, held_out.bot if with_bot else None)
            probs = fit_chooser(x_train, train.win, tau=tau, hidden=hidden)(x_eval)
            overall = choice_metrics(probs, held_out.win)
            per_bot = by_group(probs, held_out.win, held_out.bot, BOT_TYPES)
            results[name + ("+bot" if with_bot else "")] = {"overall": overall, "by_bot": per_bot}
    return results
