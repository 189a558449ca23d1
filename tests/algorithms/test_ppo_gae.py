"""GAE, truncation bootstrap and dead-NPC masking on hand-built batches."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.algorithms.ppo_objective import calculate_gae, masked_mean

GAMMA, LAM = 0.9, 0.8


def reference_gae(r, v, nv, cut, end, gamma=GAMMA, lam=LAM):
    """Plain-python GAE, written independently of the scan."""
    T = len(r)
    adv = np.zeros(T)
    nxt = 0.0
    for t in reversed(range(T)):
        delta = r[t] + gamma * nv[t] * (0.0 if cut[t] else 1.0) - v[t]
        nxt = delta + gamma * lam * (0.0 if end[t] else 1.0) * nxt
        adv[t] = nxt
    return adv


def gae(r, v, nv, cut, end):
    adv, tgt = jax.jit(calculate_gae, static_argnums=(5, 6))(
        jnp.asarray(r, jnp.float32),
        jnp.asarray(v, jnp.float32),
        jnp.asarray(nv, jnp.float32),
        jnp.asarray(cut),
        jnp.asarray(end),
        GAMMA,
        LAM,
    )
    return np.asarray(adv), np.asarray(tgt)


def test_no_done_matches_reference_and_bootstraps_last_step():
    r = [0.0, 1.0, 0.0, 2.0]
    v = [0.5, 0.4, 0.3, 0.2]
    nv = [0.4, 0.3, 0.2, 7.0]  # V of the state after the last step: bootstrapped
    f = [False] * 4
    adv, tgt = gae(r, v, nv, f, f)
    np.testing.assert_allclose(adv, reference_gae(r, v, nv, f, f), rtol=1e-6)
    np.testing.assert_allclose(tgt, adv + np.asarray(v), rtol=1e-6)
    # Last step: one-step TD error with the bootstrap value.
    np.testing.assert_allclose(adv[-1], 2.0 + GAMMA * 7.0 - 0.2, rtol=1e-6)


def test_termination_cuts_bootstrap_and_chain():
    # Episode ends (terminated) after step 1; steps 2..3 belong to a new episode.
    r = [0.0, 1.0, 0.5, 0.5]
    v = [0.3, 0.6, 0.1, 0.2]
    nv = [0.6, 99.0, 0.2, 0.4]  # 99: whatever V(terminal) says must be ignored
    cut = [False, True, False, False]
    end = [False, True, False, False]
    adv, _ = gae(r, v, nv, cut, end)
    np.testing.assert_allclose(adv[1], 1.0 - 0.6, rtol=1e-6)  # no bootstrap at a terminal step
    # Step 0 chains into step 1 but never into the next episode.
    np.testing.assert_allclose(adv[0], (0 + GAMMA * 0.6 - 0.3) + GAMMA * LAM * adv[1], rtol=1e-6)
    # Changing the next episode's rewards must not change the finished episode's advantages.
    adv2, _ = gae([0.0, 1.0, -5.0, 3.0], v, nv, cut, end)
    np.testing.assert_allclose(adv2[:2], adv[:2], rtol=1e-6)


def test_truncation_bootstraps_from_final_obs_value():
    # A timeout after step 1: bootstrap from V(final_obs) = 2.0, but do not chain.
    r = [0.0, 0.1, 0.0]
    v = [0.5, 0.5, 0.9]
    nv = [0.5, 2.0, 1.0]
    cut = [False, False, False]
    end = [False, True, False]
    adv, _ = gae(r, v, nv, cut, end)
    np.testing.assert_allclose(adv[1], 0.1 + GAMMA * 2.0 - 0.5, rtol=1e-6)
    np.testing.assert_allclose(adv, reference_gae(r, v, nv, cut, end), rtol=1e-6)
    # Treating the timeout as terminal would give a different (wrong) answer.
    wrong, _ = gae(r, v, nv, end, end)
    assert abs(wrong[1] - adv[1]) > 1.0


def test_batched_shapes_agree_with_columnwise_reference():
    rng = np.random.default_rng(0)
    T, E, N = 12, 3, 5
    r, v, nv = (rng.normal(size=(T, E, N)) for _ in range(3))
    cut = rng.random((T, E, N)) < 0.1
    end = cut | (rng.random((T, E, N)) < 0.1)
    adv, tgt = gae(r, v, nv, cut, end)
    chex.assert_shape([adv, tgt], (T, E, N))
    chex.assert_tree_all_finite((adv, tgt))
    for e in range(E):
        for n in range(N):
            ref = reference_gae(r[:, e, n], v[:, e, n], nv[:, e, n], cut[:, e, n], end[:, e, n])
            np.testing.assert_allclose(adv[:, e, n], ref, rtol=1e-5, atol=1e-5)


def test_masked_mean_ignores_dead_npcs():
    x = jnp.array([[1.0, 2.0, 1000.0], [3.0, -1000.0, 4.0]])
    mask = jnp.array([[True, True, False], [True, False, True]])
    assert float(masked_mean(x, mask)) == pytest.approx(2.5)
    assert float(masked_mean(x, jnp.zeros_like(mask))) == 0.0


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_loss_ignores_masked_transitions():
    """The PPO loss and its gradient are unchanged by garbage in dead NPCs' samples."""
    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.networks import ActorCritic
    from jaxarena.algorithms.ppo_objective import Transition, ppo_loss

    cfg = PPOConfig(hidden=8)
    net = ActorCritic(hidden=8)
    key = jax.random.PRNGKey(1)
    B = 10
    obs = jax.random.uniform(key, (B, 23))
    params = net.init(key, obs)
    mask = jnp.arange(B) < 6
    batch = Transition(
        obs=obs,
        action=jnp.arange(B) % 6,
        log_prob=jnp.full((B,), -1.7),
        value=jnp.linspace(0.0, 1.0, B),
        reward=jnp.zeros(B),
        next_value=jnp.zeros(B),
        cut=jnp.zeros(B, bool),
        end=jnp.zeros(B, bool),
        mask=mask,
    )
    adv = jnp.linspace(-1.0, 1.0, B)
    tgt = jnp.linspace(0.5, -0.5, B)
    grad_fn = jax.grad(lambda p, b, a, t: ppo_loss(net, cfg, p, b, a, t)[0])
    g1 = grad_fn(params, batch, adv, tgt)
    # Corrupt every masked-out sample.
    dead = ~mask
    batch2 = batch._replace(
        obs=jnp.where(dead[:, None], 50.0, obs),
        log_prob=jnp.where(dead, 30.0, batch.log_prob),
        value=jnp.where(dead, -40.0, batch.value),
    )
    g2 = grad_fn(params, batch2, jnp.where(dead, 1e3, adv), jnp.where(dead, -1e3, tgt))
    chex.assert_trees_all_close(g1, g2, rtol=1e-5, atol=1e-7)
    # And the mask matters: unmasking changes the gradient.
    g3 = grad_fn(params, batch2._replace(mask=jnp.ones(B, bool)), adv, tgt)
    diff = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), g1, g3)
    assert max(jax.tree.leaves(diff)) > 1e-4


def test_tag_one_hot_features_and_config_round_trip():
    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.networks import ActorCritic

    cfg = PPOConfig.from_dict(json_round_trip(PPOConfig(tag_one_hot=True, hidden=8).to_dict()))
    assert cfg.tag_one_hot and cfg.network_kwargs() == {"hidden": 8, "activation": "tanh", "tag_one_hot": True}
    net = ActorCritic(**cfg.network_kwargs())
    obs = jnp.zeros((4, 23)).at[:, 22].set(jnp.arange(4) / 3.0)
    feats = net.apply({}, obs, method="_features")
    np.testing.assert_array_equal(np.asarray(feats[:, 23:]), np.eye(4))
    params = net.init(jax.random.PRNGKey(0), obs)
    assert params["params"]["actor_layers_0"]["kernel"].shape == (27, 8)


def json_round_trip(d):
    import json

    return json.loads(json.dumps(d))


def test_an_entropy_target_pulls_the_entropy_towards_it_from_either_side():
    """`ent_target` H*: the entropy term is ent_coef * |H - H*|, so a step lowers H above H* and raises it below."""
    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.networks import ActorCritic
    from jaxarena.algorithms.ppo_objective import Transition, ppo_loss

    net = ActorCritic(hidden=8)
    obs = jax.random.uniform(jax.random.PRNGKey(2), (16, 23))
    params = net.init(jax.random.PRNGKey(3), obs)
    # A peaked policy, well below the uniform's ln 6: the policy head starts 100x smaller than the rest.
    params = jax.tree_util.tree_map_with_path(lambda path, x: x * (300.0 if "actor_out" in str(path) else 1.0), params)
    pi, value = net.apply(params, obs)
    batch = Transition(
        obs=obs,
        action=jnp.zeros(16, jnp.int32),
        log_prob=pi.log_prob(jnp.zeros(16, jnp.int32)),
        value=value,
        reward=jnp.zeros(16),
        next_value=jnp.zeros(16),
        cut=jnp.zeros(16, bool),
        end=jnp.zeros(16, bool),
        mask=jnp.ones(16, bool),
    )
    zero_adv = jnp.zeros(16)  # no policy-gradient signal and no value error: the entropy term alone

    def entropy_of(p):
        return float(jnp.mean(net.apply(p, obs)[0].entropy()))

    h = entropy_of(params)
    assert 0.1 < h < np.log(6) - 0.1
    for target, direction in ((h - 0.05, -1.0), (h + 0.05, +1.0), (None, +1.0)):
        cfg = PPOConfig(hidden=8, ent_coef=0.02, ent_target=target)
        loss, _ = ppo_loss(net, cfg, params, batch, zero_adv, value)
        expected = 0.02 * (abs(h - target) if target is not None else -h)
        np.testing.assert_allclose(float(loss), expected, rtol=1e-4, atol=1e-7)
        grads = jax.grad(lambda p, c=cfg: ppo_loss(net, c, p, batch, zero_adv, value)[0])(params)
        stepped = jax.tree.map(lambda p, g: p - 1.0 * g, params, grads)
        assert direction * (entropy_of(stepped) - h) > 0, (target, entropy_of(stepped), h)
    with pytest.raises(ValueError, match="ent_target"):
        PPOConfig(ent_target=-0.1)
