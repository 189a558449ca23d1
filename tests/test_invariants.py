"""Invariants over long random rollouts, through the public auto-resetting `step`.

One jitted program vmaps over keys *and* over params (all three bot types at
once), then every tick is checked on the host. The same checks run on
`BatchedArena.step`, which plays the same rules over arrays of arenas.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.batched import batch_first, batch_last
from jaxarena.names import BOT_WIN, NPC_WIN, TIMEOUT


def rollout(n_envs: int, n_ticks: int, seed: int, batched: bool = False):
    env, base = jaxarena.make("Arena-v0")
    bot_types = jnp.arange(n_envs) % 3
    params = jax.vmap(lambda b: base.replace(bot_type=b))(bot_types)
    step, reset, layout = jax.vmap(env.step), jax.vmap(env.reset), lambda state: state
    if batched:  # per-arena params and the state carry the batch last; the checks read it first
        arena, params = jaxarena.BatchedArena(env), batch_last(params)
        step, reset, layout = arena.step, arena.reset, batch_first

    # Even envs press the attack, odd ones mostly dodge: with bot types
    # cycling through 3, every pairing occurs and every outcome happens.
    attack = jnp.log(jnp.array([0.3, 0.1, 0.1, 0.25, 0.05, 0.2]))
    dodge = jnp.log(jnp.array([0.05, 0.3, 0.3, 0.04, 0.3, 0.01]))
    logits = jnp.where((jnp.arange(n_envs) % 2 == 0)[:, None], attack, dodge)

    @jax.jit
    def run(key):
        _, state = reset(jax.random.split(key, n_envs), params)

        def tick(state, key):
            k_act, k_step = jax.random.split(key)
            act = jax.random.categorical(k_act, logits[:, None, :], shape=(n_envs, 5))
            _, nxt, reward, done, info = step(jax.random.split(k_step, n_envs), state, act, params)
            info = {k: v for k, v in info.items() if k != "final_obs"}
            return nxt, (layout(state), layout(nxt), reward, done, info)

        return jax.lax.scan(tick, state, jax.random.split(key, n_ticks))[1]

    before, after, reward, done, info = jax.tree.map(np.asarray, run(jax.random.key(seed)))
    return base, before, after, reward, done, info


def windows(x: np.ndarray, width: int) -> np.ndarray:
    """Sums over every `width` consecutive ticks along axis 0."""
    c = np.cumsum(np.concatenate([np.zeros_like(x[:1]), x]), axis=0)
    return c[width:] - c[:-width]


def check_invariants(n_envs: int, n_ticks: int, seed: int, batched: bool = False):
    p, before, after, reward, done, info = rollout(n_envs, n_ticks, seed, batched)
    going = ~done  # ticks that did not end an episode (after = a plain successor)

    # HP never rises within an episode and never drops below zero.
    assert np.all(after.npc_hp >= 0.0) and np.all(after.bot_hp >= 0.0)
    assert np.all((after.npc_hp <= before.npc_hp)[going])
    assert np.all((after.bot_hp <= before.bot_hp)[going])

    # Dead units neither act nor deal damage; their orbs are gone.
    dead = before.npc_hp <= 0.0
    assert np.all(info["damage_dealt"][dead] == 0.0)
    moved = np.any(after.npc_pos != before.npc_pos, axis=-1)
    assert not np.any((moved & dead)[going])
    assert not np.any((after.orb_active.any(-1) & dead)[going])
    assert np.all(info["alive"] == ~dead)

    # No unit moves farther in a tick than its Table 1 speed allows, sliding on a box included.
    npc_step = np.linalg.norm(after.npc_pos - before.npc_pos, axis=-1)[going]
    bot_step = np.linalg.norm(after.bot_pos - before.bot_pos, axis=-1)[going]
    assert npc_step.max() <= p.npc_speed * p.dt + 1e-5
    assert bot_step.max() <= p.bot_speed * p.dt + 1e-5

    # No unit inside a box or outside the arena (within float tolerance).
    r, size, boxes = p.unit_radius, p.arena_size, np.asarray(p.boxes)
    pos = np.concatenate([after.npc_pos, after.bot_pos[:, :, None, :]], axis=2).reshape(-1, 2)
    assert np.all(pos >= r - 1e-4) and np.all(pos <= size - r + 1e-4)
    closest = np.clip(pos[:, None, :], boxes[:, :2], boxes[:, 2:])
    assert np.all(np.linalg.norm(pos[:, None, :] - closest, axis=-1) >= r - 1e-3)

    # Damage per unit within what its cooldown allows: one NPC melee per
    # 5 ticks (plus at most two 5-damage orbs), one bot strike per 8 ticks.
    assert np.all(windows(info["damage_dealt"], 5) <= 15.0 + 2 * 5.0 + 1e-4)
    assert np.all(windows(info["damage_taken"].sum(-1), 8) <= 15.0 + 1e-4)
    assert np.all(info["damage_dealt"] <= 15.0 + 2 * 5.0)

    # Episodes end at exactly 120 s unless a side is wiped out first.
    outcome, seconds = info["outcome"], info["episode_time"]
    assert np.all(outcome[going] == 0)
    assert np.all(np.isin(outcome[done], [NPC_WIN, BOT_WIN, TIMEOUT]))
    timeouts = done & (outcome == TIMEOUT)
    np.testing.assert_allclose(seconds[timeouts], 120.0, atol=1e-3)
    assert np.all(info["truncated"] == timeouts) and np.all(info["terminated"] == (done & ~timeouts))
    # A kill on the last tick terminates (a win) at exactly 120 s.
    assert np.all(seconds[done & ~timeouts] <= 120.0 + 1e-3)
    assert np.all(before.t < 1200)
    assert np.all((before.bot_hp > 0)[outcome == TIMEOUT]) and np.all(after.bot_hp[going] > 0)

    # Auto-reset hands back a fresh episode; the outcome survives in info.
    assert np.all(after.t[done] == 0) and np.all(after.npc_hp[done] == p.npc_hp)
    assert np.all(after.bot_hp[done] == p.bot_hp) and not after.orb_active[done].any()
    assert np.all(after.episode[done] == before.episode[done] + 1)
    spawn = np.asarray(p.npc_spawn)
    fresh_npcs = after.npc_pos[done]
    assert np.all((fresh_npcs >= spawn[:2]) & (fresh_npcs <= spawn[2:]))
    return outcome[done]


@pytest.mark.parametrize("batched", [False, True], ids=["vmap", "batched"])
def test_invariants_over_random_rollouts_of_all_bots(batched):
    outcomes = check_invariants(n_envs=24, n_ticks=1500, seed=0, batched=batched)
    # The rollout must have exercised every way an episode can end.
    assert set(np.unique(outcomes)) == {NPC_WIN, BOT_WIN, TIMEOUT}


@pytest.mark.slow
def test_invariants_over_long_rollouts():
    outcomes = check_invariants(n_envs=96, n_ticks=6000, seed=1)
    assert set(np.unique(outcomes)) == {NPC_WIN, BOT_WIN, TIMEOUT}
