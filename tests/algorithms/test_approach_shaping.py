"""The approach shaping pays each NPC gamma * Phi(s') - Phi(s), Phi = -w * max(d - range, 0) / diagonal
(0 where its episode is cut), on top of the team reward, and changes nothing else."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms import PPOConfig
from jaxarena.algorithms.ppo import arena_env
from jaxarena.algorithms.ppo_objective import hyper_of
from jaxarena.observe import BOT_DISTANCE
from jaxarena.types import arena_diagonal
from jaxarena.wrappers import LogWrapper

CLOSE_IN = 0  # the "move to the bot" action: every NPC walks into the orb range and on
TICKS = 60


def _rollout(config: PPOConfig):
    """TICKS steps of 4 arenas, every NPC closing in: rewards, obs before, final obs after, cut."""
    arena, params = jaxarena.make(config.env_id)
    env = arena_env(config, LogWrapper(arena), params)
    hyper = hyper_of(config)
    keys = jax.random.split(jax.random.PRNGKey(3), (TICKS + 1, env.num_keys))
    obs, state = env.reset(*keys[0], hyper)
    action = jnp.full((config.num_envs, 5), CLOSE_IN, jnp.int32)
    step = jax.jit(env.step)
    rows = []
    for t in range(TICKS):
        next_obs, state, out = step(*keys[t + 1], state, obs, action, hyper)
        rows.append((out.reward, obs, out.final_obs, out.cut))
        obs = next_obs
    return [np.stack([np.asarray(r[i]) for r in rows]) for i in range(4)], float(arena_diagonal(params))


@pytest.mark.parametrize("reach", [0.0, 12.0])
def test_the_shaping_is_the_potential_difference_and_pays_nothing_within_the_range(reach):
    base = PPOConfig(combination="A", num_envs=4, bots=("balanced",))
    (plain, obs, final_obs, cut), diagonal = _rollout(base)
    w = 0.5
    (shaped, obs_s, final_s, cut_s), _ = _rollout(base.replace(approach_shaping=w, approach_range=reach))
    # The shaping moves no unit: the same trajectories, only the reward differs.
    np.testing.assert_array_equal(obs, obs_s)
    np.testing.assert_array_equal(cut, cut_s)
    chex.assert_shape(shaped, (TICKS, 4, 5))

    def potential(o):
        return -w * np.maximum(o[..., BOT_DISTANCE] - reach / diagonal, 0.0)

    expected = base.gamma * np.where(cut, 0.0, potential(final_obs)) - potential(obs)
    np.testing.assert_allclose(shaped - plain, expected, atol=1e-6)
    # Closing in is never charged.
    grew = final_obs[..., BOT_DISTANCE] > obs[..., BOT_DISTANCE]
    assert (~grew).mean() > 0.5 and np.all((shaped - plain)[~grew] >= -1e-6)
    inside = (obs[..., BOT_DISTANCE] * diagonal < reach) & (final_obs[..., BOT_DISTANCE] * diagonal < reach)
    if reach:
        assert inside.any() and (~inside).any()  # the squad crossed into the range within the rollout
        np.testing.assert_array_equal((shaped - plain)[inside], 0.0)
    else:
        assert np.all((shaped - plain)[~cut] != 0.0)


@pytest.mark.parametrize(
    "field, bad", [("approach_shaping", -0.1), ("approach_range", -1.0), ("approach_range", float("inf"))]
)
def test_bad_shaping_values_are_refused(field, bad):
    with pytest.raises(ValueError, match=field):
        PPOConfig(**{field: bad})
