"""The generic PPO core learns a task whose answer is known, and checks its config."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from jaxarena.algorithms.ppo_core import CoreConfig, make_core_trainer

NUM_ARMS = 4


class ContextBandit:
    """One-step episodes: the observation names the rewarding arm; any other arm pays 0."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs

    def _draw(self, key):
        arm = jax.random.randint(key, (self.num_envs,), 0, NUM_ARMS)
        return jax.nn.one_hot(arm, NUM_ARMS), arm

    def reset(self, key):
        return self._draw(key)

    def step(self, key, arm, action):
        reward = (action == arm).astype(jnp.float32)
        obs, arm = self._draw(key)
        done = jnp.ones((self.num_envs,), bool)
        return obs, arm, reward, done, {"correct": reward}


class Net(nn.Module):
    @nn.compact
    def __call__(self, obs):
        h = nn.tanh(nn.Dense(16)(obs))
        return nn.Dense(NUM_ARMS)(h), nn.Dense(1)(h)[..., 0]


def test_core_learns_a_context_bandit():
    config = CoreConfig(num_envs=32, num_steps=8, num_minibatches=4, lr=3e-3, total_updates=60, ent_coef=0.0)
    trainer = make_core_trainer(ContextBandit(32), Net(), config)
    state = trainer.init(jax.random.PRNGKey(0))
    state, metrics = jax.jit(trainer.run_updates, static_argnums=1)(state, 60)
    chex.assert_shape(metrics["correct"], (60,))
    assert float(metrics["correct"][:3].mean()) < 0.5  # chance is 0.25
    assert float(metrics["correct"][-5:].mean()) > 0.9
    assert int(state.update) == 60


def test_core_masked_actions_are_never_sampled():
    class Masked(Net):
        @nn.compact
        def __call__(self, obs):
            logits, value = Net.__call__(self, obs)
            return logits.at[:, 0].set(-jnp.inf), value

    config = CoreConfig(num_envs=16, num_steps=4, num_minibatches=2, total_updates=5)
    trainer = make_core_trainer(ContextBandit(16), Masked(), config)
    state, metrics = jax.jit(trainer.run_updates, static_argnums=1)(trainer.init(jax.random.PRNGKey(1)), 5)
    assert bool(jnp.all(jnp.isfinite(metrics["total_loss"])))
    assert bool(jnp.all(jnp.isfinite(metrics["entropy"])))


@pytest.mark.parametrize("bad", [{"num_envs": 0}, {"num_minibatches": 3}, {"lr": 0.0}])
def test_core_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        CoreConfig(**bad)
