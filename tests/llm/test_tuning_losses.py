"""The 4-way SFT, DPO and GRPO losses against hand-computed references on toys."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.llm.tuning.losses import (
    dpo_loss,
    exact_kl,
    group_advantages,
    grpo_loss,
    sft_argmax_loss,
    sft_loss,
    soft_targets,
)


def _softmax(x):
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


def test_sft_is_the_kl_to_the_soft_oracle_target():
    logits = np.array([[1.0, 2.0, 0.5, -1.0]], np.float32)
    q = np.array([[0.2, 0.9, 0.9, 0.1]], np.float32)
    tau = 0.1
    target = _softmax(q[0] / tau)
    p = _softmax(logits[0])
    expected = float(np.sum(target * (np.log(target) - np.log(p))))
    assert float(sft_loss(jnp.asarray(logits), jnp.asarray(q), tau)) == pytest.approx(expected, rel=1e-5)
    # A tie in Q stays a tie in the target.
    t = np.asarray(soft_targets(jnp.asarray(q), tau))[0]
    assert t[1] == pytest.approx(t[2]) and t[1] > 0.49


def test_sft_is_zero_at_the_target_and_argmax_ce_matches():
    q = jnp.array([[0.0, 1.0, 0.5, 0.25]])
    assert float(sft_loss(q / 0.5, q, 0.5)) == pytest.approx(0.0, abs=1e-6)
    logits = jnp.array([[0.0, 1.0, 2.0, 3.0], [3.0, 0.0, 0.0, 0.0]])
    expected = -(math.log(_softmax([0, 1, 2, 3])[2]) + math.log(_softmax([3, 0, 0, 0])[0])) / 2
    assert float(sft_argmax_loss(logits, jnp.array([2, 0]))) == pytest.approx(expected, rel=1e-5)


def test_dpo_matches_the_hand_computed_loss():
    logits = np.array([[0.5, 1.5, -0.5, 0.0], [2.0, 0.0, 1.0, 0.0]], np.float32)
    ref = np.array([[0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    better, worse, beta = np.array([0, 2]), np.array([1, 3]), 0.5
    total = 0.0
    for i in range(2):
        lp, lr = np.log(_softmax(logits[i])), np.log(_softmax(ref[i]))
        margin = (lp[better[i]] - lr[better[i]]) - (lp[worse[i]] - lr[worse[i]])
        total += -math.log(1 / (1 + math.exp(-beta * margin)))
    got = dpo_loss(jnp.asarray(logits), jnp.asarray(ref), jnp.asarray(better), jnp.asarray(worse), beta)
    assert float(got) == pytest.approx(total / 2, rel=1e-5)
    # At the reference the loss is log 2, and its gradient raises the better tag.
    grad = jax.grad(lambda lg: dpo_loss(lg, jnp.asarray(ref), jnp.array([0]), jnp.array([1]), beta))(
        jnp.asarray(ref[:1])
    )
    assert float(dpo_loss(jnp.asarray(ref), jnp.asarray(ref), jnp.asarray(better), jnp.asarray(worse), beta)) == (
        pytest.approx(math.log(2), rel=1e-6)
    )
    assert grad[0, 0] < 0 < grad[0, 1]


def test_group_advantages_are_zero_for_a_uniform_group():
    adv = np.asarray(group_advantages(jnp.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])))
    np.testing.assert_allclose(adv[0], [1, -1, -1, 1], atol=1e-5)
    np.testing.assert_array_equal(adv[1], 0.0)


def test_grpo_matches_the_hand_computed_objective():
    logits = np.array([[0.3, 0.1, -0.2, 0.0]], np.float32)
    old = np.array([[0.0, 0.0, 0.0, 0.0]], np.float32)
    ref = np.array([[0.0, 0.5, 0.0, 0.0]], np.float32)
    tags = np.array([[0, 1, 0, 3]])
    adv = np.array([[1.0, -1.0, 0.5, -0.5]], np.float32)
    eps, beta = 0.2, 0.1
    lp, lo, lr = np.log(_softmax(logits[0])), np.log(_softmax(old[0])), np.log(_softmax(ref[0]))
    surr = []
    for t, a in zip(tags[0], adv[0], strict=True):
        ratio = math.exp(lp[t] - lo[t])
        surr.append(min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a))
    kl = float(np.sum(np.exp(lp) * (lp - lr)))
    expected = -np.mean(surr) + beta * kl
    loss, stats = grpo_loss(
        jnp.asarray(logits),
        jnp.asarray(old),
        jnp.asarray(ref),
        jnp.asarray(tags),
        jnp.asarray(adv),
        clip_eps=eps,
        kl_coef=beta,
    )
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(stats["kl"]) == pytest.approx(kl, rel=1e-5)
    assert float(exact_kl(jnp.asarray(ref), jnp.asarray(ref))[0]) == pytest.approx(0.0, abs=1e-7)


def test_weights_drop_rows():
    logits = jnp.array([[0.0, 1.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]])
    best = jnp.array([1, 1])
    only_first = sft_argmax_loss(logits[:1], best[:1])
    assert float(sft_argmax_loss(logits, best, jnp.array([1.0, 0.0]))) == pytest.approx(float(only_first))
