"""A learned bot, trained with PPO against a frozen squad: checkpoints for the opponent population.

    squad, squad_params = load_policy("B-paper")
    _, env_params = jaxarena.make("Arena-v0", scenario="headroom")
    checkpoints, metrics = train_bot(squad, squad_params, env_params, learned_bot_key(0),
                                     total_steps=2_000_000, num_envs=64, checkpoint_every=500_000)
    _, params = jaxarena.make("Arena-v0", scenario="headroom", bot="learned", bot_weights=checkpoints[-1])

`learned_bot_key(seed)` (`jaxarena.key_streams`) is the selector's key for its bot: the seed's key
with a stream constant of its own folded in, so the bot's episodes are none of the protocol's.

The environment is `jaxarena.bot_arena.BotArena` (the bot learns, the squad's
tag is redrawn every 5 s), the learner `algorithms.ppo_core`. The network is
the arena's own MLP (`jaxarena.learned_bot`) wrapped as a flax module, so a
checkpoint, `params["params"]["actor"]`, is exactly the `BotWeights`
`EnvParams.bot_weights` takes: the arena plays it without this module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.bot_arena import BotArena
from jaxarena.learned_bot import (
    bot_logits,
    bot_value,
    check_bot_weights,
    init_bot_value_weights,
    init_bot_weights,
)
from jaxarena.names import BOT_LEARNED, BOT_WIN, NPC_WIN, NUM_TAGS, TIMEOUT
from jaxarena.runner import make_runner
from jaxarena.types import BotWeights, EnvParams

from . import driver
from .batch_runs import is_key_batch, run_fns
from .checkpoint import Checkpointer
from .driver import updates_done
from .ppo_core import CoreConfig, make_core_trainer
from .train_metrics import MetricsLog

#: PPO settings for the bot (per tick, one agent per arena); `train_bot(config=...)` overrides.
DEFAULT_CONFIG = CoreConfig(num_envs=64, num_steps=64, update_epochs=4, num_minibatches=4, gamma=0.99, ent_coef=0.01)


class BotActorCritic(nn.Module):
    """`apply(params, obs) -> (logits (B, 9), value (B,))` over the learned bot's MLPs.

    The actor's parameters are `init_bot_weights`' `BotWeights` as is, under "actor",
    so `params["params"]["actor"]` is a bot the arena can run.
    """

    hidden: int = 64

    @nn.compact
    def __call__(self, obs):
        actor = self.param("actor", lambda key: init_bot_weights(key, self.hidden))
        critic = self.param("critic", lambda key: init_bot_value_weights(key, self.hidden))
        return bot_logits(actor, obs), bot_value(critic, obs)


def actor_weights(network_params) -> BotWeights:
    """The bot weights (`EnvParams.bot_weights`) inside `BotActorCritic` parameters."""
    return network_params["params"]["actor"]


def train_bot(
    squad_policy: Callable,
    squad_params: Any,
    env_params: EnvParams,
    key: jax.Array,
    total_steps: int,
    num_envs: int = 64,
    checkpoint_every: int | None = None,
    *,
    config: CoreConfig | None = None,
    hidden: int = 64,
    env_id: str | None = None,
    approach_shaping: float = 3.0,
    out: str | Path | None = None,
) -> tuple[list[BotWeights], dict[str, np.ndarray]]:
    """Train a bot against `squad_policy`; returns (checkpoints, oldest first; metrics per update).

    `total_steps` and `checkpoint_every` count arena ticks over all arenas
    (env steps). Training runs round(total_steps / (`num_envs` x
    `config.num_steps`)) PPO updates, at least one, and takes
    round(total_steps / checkpoint_every) checkpoints (default one) evenly
    spaced, the last at the end, so the list is never empty. Each is a
    `BotWeights` on the host; `metrics["checkpoint_env_steps"]` says
    after how many env steps each was taken.
    `metrics` holds one entry per update (`ppo_core`'s: losses, reward_mean,
    episodes, and the episode-end means of `BotArena`'s info: bot_win,
    npc_win, timeout, damage_dealt, damage_taken, episode_return, episode_s)
    plus `env_steps`, the ticks trained after each update. `approach_shaping`
    is `BotArena`'s potential-based lead towards the squad (0 turns it off;
    without it the bot rarely meets a squad that waits, and learns to idle).
    Against B on `headroom` (2M steps) weight 1 found the fight in 1 of 3
    seeds and weight 3 in 4 of 4, hence the default.

    With `out`, the run trains through the training driver's checkpoints there (every checkpoint of
    the list kept, and the metrics in `out/metrics.jsonl`), so the same call resumes an interrupted
    run and returns a finished one without training.

    `key` may be a batch of keys (`jax.random.split(key, n)`): the n seeds then train in one
    vmapped program, every checkpoint's leaves gain a leading seed axis of n, and every metric is
    (n, updates).
    """
    base = DEFAULT_CONFIG if config is None else config
    for name, value in (("num_envs", num_envs), ("total_steps", total_steps), ("checkpoint_every", checkpoint_every)):
        if value is not None and (isinstance(value, bool) or int(value) != value or int(value) < 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    per_update = int(num_envs) * base.num_steps
    total_updates = max(1, round(int(total_steps) / per_update))
    n_checkpoints = 1 if checkpoint_every is None else max(1, round(int(total_steps) / int(checkpoint_every)))
    n_checkpoints = min(n_checkpoints, total_updates)
    # Evenly spaced: chunks differ by at most one update, so at most two scan lengths compile.
    bounds = [round(k * total_updates / n_checkpoints) for k in range(n_checkpoints + 1)]
    config = dataclasses.replace(base, num_envs=int(num_envs), total_updates=total_updates)
    env = BotArena(
        squad_policy,
        squad_params,
        env_params,
        config.num_envs,
        env_id=env_id,
        approach_shaping=approach_shaping,
        gamma=config.gamma,
        stagger=True,
    )
    trainer = make_core_trainer(env, BotActorCritic(hidden=hidden), config)
    batched = is_key_batch(key)  # a batch of keys: a run per key, one program
    if batched and out is not None:
        raise ValueError("out: train one seed per folder (a batch of keys keeps its checkpoints in memory)")
    init, run = run_fns(trainer, batched=batched)
    state = jax.jit(init)(key)
    settings = dict(total_steps=int(total_steps), num_envs=int(num_envs), checkpoint_every=checkpoint_every)
    settings.update(config=dataclasses.asdict(config), hidden=hidden, env_id=env_id, approach_shaping=approach_shaping)
    checkpointers = [] if out is None else [_bot_folder(Path(out), {**settings, "key": np.asarray(key).tolist()})]
    try:
        if checkpointers and checkpointers[0].all_steps():  # resume: where the bot's run saved last
            state = driver.restore(checkpointers, state, False, start_over=f"delete {out} to train the bot again")
        log = None if out is None else MetricsLog(Path(out), updates_done(state))
        checkpoints, chunks = [], []
        steps = driver.chunks(
            run, state, total_updates, chunk=total_updates, checkpointers=checkpointers, stops=bounds, say=_quiet
        )
        for state, metrics, n, _ in steps:
            if log is None:
                checkpoints.append(jax.device_get(actor_weights(state.train_state.params)))
                chunks.append(metrics)
            else:
                log.append([{k: np.asarray(v)[i].item() for k, v in metrics.items()} for i in range(n)])
        if log is not None:  # every checkpoint and row, the ones of an earlier (interrupted) run included
            template = jax.device_get(state)
            restored = [checkpointers[0].restore(template, step) for step in bounds[1:]]
            checkpoints = [actor_weights(s.train_state.params) for s in restored]
            chunks = [{k: np.asarray([row[k] for row in log.rows]) for k in log.rows[0]}]
    finally:
        for checkpointer in checkpointers:
            checkpointer.close()
    metrics = {k: np.concatenate([np.asarray(c[k]) for c in chunks], axis=-1) for k in chunks[0]}
    metrics["env_steps"] = metrics["update"].astype(np.int64) * per_update
    metrics["checkpoint_env_steps"] = np.asarray(bounds[1:], np.int64) * per_update
    return checkpoints, metrics


def _quiet(message: str) -> None:
    """The driver's compile lines go unsaid: the bot trains inside other commands, whose stdout is theirs."""


def _bot_folder(out: Path, settings: dict) -> Checkpointer:
    """The checkpointer of a bot trained in `out`, which records the settings it trains with
    (`run.json`) and refuses others: another budget or schedule would ask for checkpoints it lacks."""
    record = out / "run.json"
    if record.exists() and json.loads(record.read_text()) != settings:
        raise ValueError(f"{out} holds a bot trained with other settings ({record}): use another folder")
    out.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(settings, indent=2))
    return Checkpointer(out, None, max_to_keep=None, save_config=False)


def random_tags(features, prev_tags, done, time_s, key) -> jax.Array:
    """A tag source drawing every episode's tag uniformly each decision period, as `BotArena` does."""
    return jax.random.randint(key, prev_tags.shape, 0, NUM_TAGS, dtype=jnp.int32)


def evaluate_bot(
    weights: BotWeights,
    squad_policy: Callable,
    squad_params: Any,
    env_params: EnvParams,
    key: jax.Array,
    num_episodes: int = 256,
    env_id: str | None = None,
) -> dict[str, float]:
    """Play `num_episodes` first episodes of the arena's learned bot (`weights`) against the squad.

    Runs through the episode runner with `bot_type` BOT_LEARNED and
    `bot_weights` set, i.e. the arena's own path, with the squad's tag drawn
    uniformly every decision period. Returns the bot's win rate, the squad's
    win rate, the timeout rate, and the mean damage per episode the bot dealt
    (`squad_damage_taken`) and took (`bot_damage_taken`), in HP.
    """
    from jaxarena.registry import arena_for

    env_id = env_id or getattr(squad_policy, "env_id", "Arena-v0")
    params = env_params.replace(bot_type=BOT_LEARNED, bot_weights=check_bot_weights(weights))
    arena = arena_for(env_id, params)
    run = jax.jit(make_runner(arena, params, squad_policy, random_tags, num_episodes))
    result = jax.device_get(run(squad_params, params, key))
    outcome = np.asarray(result.outcome)
    return {
        "bot_win": float(np.mean(outcome == BOT_WIN)),
        "npc_win": float(np.mean(outcome == NPC_WIN)),
        "timeout": float(np.mean(outcome == TIMEOUT)),
        "squad_damage_taken": float(np.mean(result.damage_taken)),
        "bot_damage_taken": float(np.mean(result.damage_dealt)),
        "episodes": int(num_episodes),
    }
