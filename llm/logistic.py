"""A multinomial logistic regression: the trivial baseline that the LLM's deduction is scored beside.

The deduction's per-bot accuracy is reported next to a logistic
regression on the same features. Features are standardised with the training
set's mean and spread, then weights are fit by full-batch Adam on the mean
cross-entropy plus a small L2 penalty (a convex problem, so the optimiser's
details barely matter). Small and deterministic; no extra dependency.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


class LogisticModel(NamedTuple):
    mean: jax.Array  # (D,)
    scale: jax.Array  # (D,)
    weights: jax.Array  # (D, K)
    bias: jax.Array  # (K,)


def _logits(model: LogisticModel, x: jax.Array) -> jax.Array:
    return ((jnp.asarray(x, jnp.float32) - model.mean) / model.scale) @ model.weights + model.bias


def fit_logistic(
    x: np.ndarray, y: np.ndarray, num_classes: int, *, l2: float = 1e-3, steps: int = 500, lr: float = 0.05
) -> LogisticModel:
    """Fits softmax regression of integer labels `y` (N,) on features `x` (N, D)."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.int32)
    if x.ndim != 2 or y.shape != x.shape[:1]:
        raise ValueError(f"need x (N, D) and y (N,), got {x.shape} and {y.shape}")
    mean = x.mean(0)
    # A constant column (e.g. a validity flag that is always set) keeps scale 1 instead of dividing by 0.
    std = x.std(0)
    scale = jnp.where(std > 1e-6, std, 1.0)
    init = LogisticModel(mean, scale, jnp.zeros((x.shape[1], num_classes)), jnp.zeros((num_classes,)))

    def loss(wb):
        model = init._replace(weights=wb[0], bias=wb[1])
        ce = optax.softmax_cross_entropy_with_integer_labels(_logits(model, x), y).mean()
        return ce + l2 * jnp.sum(wb[0] ** 2)

    opt = optax.adam(lr)

    @jax.jit
    def train(wb):
        def step(carry, _):
            wb, state = carry
            grads = jax.grad(loss)(wb)
            updates, state = opt.update(grads, state, wb)
            return (optax.apply_updates(wb, updates), state), None

        (wb, _), _ = jax.lax.scan(step, (wb, opt.init(wb)), None, length=steps)
        return wb

    weights, bias = train((init.weights, init.bias))
    return init._replace(weights=weights, bias=bias)


def predict_proba(model: LogisticModel, x: np.ndarray) -> np.ndarray:
    """(N, K) class probabilities."""
    return np.asarray(jax.nn.softmax(_logits(model, x), axis=-1))


def predict(model: LogisticModel, x: np.ndarray) -> np.ndarray:
    """(N,) most probable class."""
    return np.asarray(jnp.argmax(_logits(model, x), axis=-1), np.int32)


def majority_class(y: np.ndarray, num_classes: int) -> int:
    """The most frequent label (ties to the lower class): the majority baseline's constant answer."""
    return int(np.argmax(np.bincount(np.asarray(y, np.int64), minlength=num_classes)))
