"""The one PPO core learns a task whose answer is known, trains seeds and settings in one program, and checks
its config."""

import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from jaxarena.algorithms.batch_runs import init_runs, train_fn
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


def test_core_learns_a_context_bandit_from_every_seed():
    config = CoreConfig(num_envs=32, num_steps=8, num_minibatches=4, lr=3e-3, total_updates=60, ent_coef=0.0)
    trainer = make_core_trainer(ContextBandit(32), Net(), config)
    # Three seeds in one vmapped program: each must learn, not just a lucky one.
    state, metrics = jax.jit(train_fn(trainer, 60))(jax.random.split(jax.random.PRNGKey(0), 3))
    chex.assert_shape(metrics["correct"], (3, 60))
    assert float(metrics["correct"][:, :3].mean()) < 0.5  # chance is 0.25
    assert float(metrics["correct"][:, -5:].mean(axis=1).min()) > 0.9
    assert state.update.tolist() == [60, 60, 60]


def test_core_runs_settings_of_the_float_hyper_parameters_in_one_program():
    """A run's floats live in its state: a vmapped batch over lr trains each run as its own config alone."""
    lrs = (1e-3, 1e-2)
    config = CoreConfig(num_envs=8, num_steps=4, num_minibatches=2, update_epochs=2, total_updates=3)
    trainer = make_core_trainer(ContextBandit(8), Net(), config)
    key = jax.random.PRNGKey(5)
    hypers = {k: jnp.stack([v] * len(lrs)) for k, v in trainer.init(key).hyper.items()}
    hypers["lr"] = jnp.asarray(lrs, jnp.float32)
    run = jax.jit(lambda s: jax.vmap(lambda one: trainer.run_updates(one, 3))(s))
    batch, _ = run(init_runs(trainer, jnp.stack([key] * len(lrs)), hypers))
    for i, lr in enumerate(lrs):
        own = make_core_trainer(ContextBandit(8), Net(), dataclasses.replace(config, lr=lr))
        alone, _ = jax.jit(own.run_updates, static_argnums=1)(own.init(key), 3)
        chex.assert_trees_all_close(
            jax.tree.map(lambda x, i=i: x[i], batch.train_state.params), alone.train_state.params, atol=1e-6
        )  # to float tolerance: vmapped and single programs may sum in another order
    assert not jnp.allclose(
        batch.train_state.params["params"]["Dense_1"]["kernel"][0],
        batch.train_state.params["params"]["Dense_1"]["kernel"][1],
    )


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


@pytest.mark.parametrize("bad", [{"num_envs": 0}, {"num_minibatches": 3}, {"lr": -1e-3}, {"agents": 0}])
def test_core_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        CoreConfig(**bad)
