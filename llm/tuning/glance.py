"""The glance prompt learned from play: a learner learns from the game what to answer at each 0.2 s glance.

The glance prompt (`llm.glance`) is a finite set of prompts: time since the
fight began x nearest-NPC distance x the bot's approach since the last glance.
The LLM's 4-way choice on every prompt is one forward pass (`llm.glance_model.GlanceModel`), so
its answers form a table (cell -> tag) the rollout reads at each decision.

One training step, on the device, per bot in `bots`:

1. *Ask.* Each of `spawns` groups asks about one cell: any cell, drawn at
   random (`ask="any"`), or one drawn among the cells that a scout lane,
   playing the group's spawn with the model's most likely answers, glanced in
   (`ask="visited"`). Its `group` lanes start from the same spawn state with
   the same random numbers; they give each of the four answers in that cell
   (group / 4 lanes each) and the model's most likely answer in every other
   cell. A group that asks about a cell its game never shows learns nothing;
   on `raid`, asking about visited cells took the share of groups whose
   outcomes differed from about a fifth to about a half, for an eighth more
   play (the scout).
2. *Play* every lane to the end through the one runner (`Start`); the
   reward is 1 for a win. Lanes that never glance in the asked cell play the
   same game, so the outcomes of a group differ only by the answer asked about.
3. *Update.* Group-relative advantages, averaged per (cell, answer) over the
   groups that asked (`credit`) and kept as a decaying mean over steps
   (`memory`). The target answers per cell are the closed-form best of
   E[advantage] - beta KL(. || base model): the base model's probabilities
   times exp(advantage / beta) (`target_probs`). `inner_steps` Adam steps of
   cross-entropy to the target (`glance_loss`).

Every answer is played rather than sampled, and the target is fit by
cross-entropy rather than by the policy gradient, because the first tries
did not learn: with sampled answers the model's rare ones (Retreat,
p ~ 0.1) were seldom played, and the policy gradient, scaled by each
answer's probability, moved every cell onto Aggressive (the shared
adapter moves all cells together) before a rare answer could rise where it
wins (docs/llm-training.md).

The learner (`glance_learner`) is the LLM through a LoRA adapter (the
recipe), or an 18 x 4 table of logits trained by the same steps on the same
keys (`learner="table"`): the ablation of what the LLM adds to a table.

Training spawns come from `training_key(seed, step)`, a stream apart from the
protocol's keys, on which `glance_report` plays the untrained and the tuned
learner's most likely answers beside always Aggressive (what the stock LLM
answers to Table 10's prompt on `raid`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxarena.key_streams import GLANCE_STREAM
from jaxarena.names import BOT_TYPES, NPC_WIN, NUM_TAGS
from jaxarena.runner import Start, make_runner

from ..glance import GLANCE_PERIOD_S, NUM_GLANCE_CELLS, glance_source, initial_carry
from ..glance_model import greedy_table
from . import losses
from .glance_learner import DEFAULT_LR, LEARNERS, TABLE_PRIORS, as_learner
from .paired_play import squad_setup

#: Training keys: fold_in(PRNGKey(seed), TRAINING_STREAM + step); the protocol's keys fold in a bot index (0..2).
TRAINING_STREAM = GLANCE_STREAM
#: How a group picks the cell it asks about (`GlanceConfig.ask`): any cell, uniformly; or one that a scout
#: lane, playing the group's spawn with the model's most likely answers, glanced in (`visited_cells`).
ASK_RULES = ("any", "visited")


@dataclasses.dataclass(frozen=True)
class GlanceConfig:
    """A glance training run: the squad, the sizes of a step, and the coefficients; see the module docstring."""

    scenario: str = "raid"
    policy: str = "B-obey-raid"
    bots: tuple[str, ...] = BOT_TYPES
    steps: int = 100
    spawns: int = 32
    group: int = 8
    inner_steps: int = 2
    beta: float = 0.1
    memory: float = 0.95
    lr: float | None = None  # None: the learner's default (`glance_learner.DEFAULT_LR`)
    rank: int = 8
    seed: int = 0
    ask: str = "any"
    learner: str = "llm"
    table_prior: str = "stock"

    def __post_init__(self):
        object.__setattr__(self, "bots", tuple(self.bots))
        unknown = [b for b in self.bots if b not in BOT_TYPES]
        if unknown or not self.bots:
            raise ValueError(f"bots must be a non-empty subset of {', '.join(BOT_TYPES)}; got {list(self.bots)}")
        for name in ("steps", "spawns", "inner_steps", "rank"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group < NUM_TAGS or self.group % NUM_TAGS:
            raise ValueError(f"group must be a multiple of {NUM_TAGS} (each answer played alike), got {self.group}")
        if self.ask not in ASK_RULES:
            raise ValueError(f"ask must be one of {', '.join(ASK_RULES)}; got {self.ask!r}")
        if self.learner not in LEARNERS or self.table_prior not in TABLE_PRIORS:
            raise ValueError(
                f"learner must be one of {', '.join(LEARNERS)} and table_prior one of {', '.join(TABLE_PRIORS)}; "
                f"got {self.learner!r}, {self.table_prior!r}"
            )
        if self.lr is None:
            object.__setattr__(self, "lr", DEFAULT_LR[self.learner])
        if not self.lr > 0 or not self.beta > 0 or not 0 <= self.memory < 1 or self.seed < 0:
            raise ValueError("lr and beta must be > 0, memory in [0, 1), seed >= 0")

    def to_json(self) -> dict:
        fields = {**dataclasses.asdict(self), "bots": list(self.bots)}
        # Runs and cards written before the asking rule existed asked about any cell and do not name it:
        # leaving the default out keeps their checkpoints resumable and their configs equal to today's.
        if fields["ask"] == "any":
            del fields["ask"]
        # Likewise the learner: the LLM's runs name none, and the table's prior is the table's alone.
        if fields["learner"] == "llm":
            del fields["learner"], fields["table_prior"]
        return fields


def training_key(seed: int, step: int) -> jax.Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), TRAINING_STREAM + step)


def credit(focus: jax.Array, answers: jax.Array, advantages: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each (cell, answer)'s advantages summed over the groups that asked about the cell, and the groups per cell.

    focus (S,) the cell each group asked about; answers, advantages (S, G) per lane.
    Returns (NUM_GLANCE_CELLS, 4) sums divided by each answer's lanes per group, and (NUM_GLANCE_CELLS,) counts.
    """
    lanes_per_answer = answers.shape[1] / NUM_TAGS
    asked = jax.nn.one_hot(focus, NUM_GLANCE_CELLS)  # (S, C)
    per_answer = jnp.einsum("sg,sgt->st", advantages, jax.nn.one_hot(answers, NUM_TAGS)) / lanes_per_answer
    return asked.T @ per_answer, asked.sum(axis=0)


def visited_cells(result) -> jax.Array:
    """(N, NUM_GLANCE_CELLS) bool: the cells each episode of a `glance_source` rollout glanced in while running."""
    glanced = jax.nn.one_hot(result.decision_aux, NUM_GLANCE_CELLS, dtype=jnp.bool_)  # (P, N, C)
    return jnp.any(glanced & result.decision_active[..., None], axis=0)


def make_collect(env, env_params, policy, learner, config: GlanceConfig) -> Callable:
    """`collect(learned, frozen, policy_params, params, key) -> (advantage, asked, stats)` on one bot; traceable.

    `learner`: a `glance_learner` learner (or a `GlanceModel`, the LLM's); `learned` its parameters and `frozen`
    what it holds fixed. See `credit` for what advantage and asked hold.
    """
    learner = as_learner(learner)
    lanes = config.spawns * config.group
    play = make_runner(env, env_params, policy, glance_source(), lanes)
    scout = make_runner(env, env_params, policy, glance_source(), config.spawns)
    answers = jnp.tile(jnp.arange(NUM_TAGS, dtype=jnp.int32), (config.spawns, config.group // NUM_TAGS))

    def ask_about(key, greedy, policy_params, params, spawned, spawn_keys, k_play):
        """(spawns,) the cell each group asks about, by `config.ask`."""
        if config.ask == "any":
            return jax.random.randint(key, (config.spawns,), 0, NUM_GLANCE_CELLS)
        # The scout plays the group's spawn and random numbers with the most likely answers, i.e. the game of
        # the group's lanes that give the most likely answer in the asked cell too; every cell it glanced in
        # is one the whole group reaches, so no group asks about a cell its game never shows.
        seen = visited_cells(
            scout(
                policy_params,
                params,
                k_play,
                start=Start(spawned, jnp.int32(0)),
                tag_state=initial_carry(jnp.broadcast_to(greedy, (config.spawns, NUM_GLANCE_CELLS)), config.spawns),
                episode_keys=spawn_keys,
            )
        )
        return jax.random.categorical(key, jnp.where(seen, 0.0, -jnp.inf)).astype(jnp.int32)

    def collect(learned, frozen, policy_params, params, key):
        k_reset, k_focus, k_play = jax.random.split(key, 3)
        logits = jax.lax.stop_gradient(learner.logits(frozen, learned))
        _, spawned = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, config.spawns), params)
        states = jax.tree.map(lambda x: jnp.repeat(x, config.group, axis=0), spawned)
        # A group asks about one cell: its lanes give each of the four answers there (G/4 lanes each),
        # the model's most likely answer everywhere else, and share the spawn and the random numbers.
        # Lanes that never glance in that cell play the same game, so a difference in the group's
        # outcomes is the answer's doing.
        greedy = jnp.argmax(logits, -1).astype(jnp.int32)
        spawn_keys = jax.random.split(k_play, config.spawns)
        focus = ask_about(k_focus, greedy, policy_params, params, spawned, spawn_keys, k_play)
        at_focus = jnp.arange(NUM_GLANCE_CELLS)[None, None, :] == focus[:, None, None]
        tables = jnp.where(at_focus, answers[..., None], greedy[None, None, :])
        tables = tables.reshape(lanes, NUM_GLANCE_CELLS).astype(jnp.int32)
        keys = jnp.repeat(spawn_keys, config.group, axis=0)
        result = play(
            policy_params,
            params,
            k_play,
            start=Start(states, jnp.int32(0)),
            tag_state=initial_carry(tables, lanes),
            episode_keys=keys,
        )
        wins = (result.outcome == NPC_WIN).astype(jnp.float32).reshape(config.spawns, config.group)
        advantage, asked = credit(focus, answers, losses.group_advantages(wins))
        # Whether any lane of a group glanced in the cell it asked about: a group that did not learned nothing.
        lane_seen = visited_cells(result).reshape(config.spawns, config.group, NUM_GLANCE_CELLS)
        reached = jnp.take_along_axis(lane_seen.any(axis=1), focus[:, None], axis=1)[:, 0]
        stats = {"win": wins.mean(), "informative": jnp.mean(wins.std(-1) > 0), "reached": reached.mean()}
        return advantage, asked, stats

    return collect


def target_probs(ref_logits: jax.Array, advantage: jax.Array, beta: float) -> jax.Array:
    """(cells, 4): argmax of E_p[advantage] - beta KL(p || base), p proportional to p_base exp(advantage / beta).

    A cell never asked about (advantage 0) keeps the base model's answers.
    """
    return jax.nn.softmax(losses.option_log_probs(ref_logits) + advantage / beta, axis=-1)


def glance_loss(logits: jax.Array, target: jax.Array) -> jax.Array:
    """Cross-entropy of the model's answers to the target, averaged over cells."""
    return -jnp.mean(jnp.sum(target * losses.option_log_probs(logits), axis=-1))


def make_update(learner, config: GlanceConfig, optimizer) -> Callable:
    """`update(learned, opt_state, frozen, advantage) -> (learned, opt_state, stats)`; traceable.

    `learner` as in `make_collect`. stats: the last inner step's loss, and the updated learner's logits and KL
    to the reference (the base model; a table's prior).
    """
    learner = as_learner(learner)

    def update(learned, opt_state, frozen, advantage):
        ref = jax.lax.stop_gradient(learner.logits(frozen, None))
        target = target_probs(ref, advantage, config.beta)

        def inner(carry, _):
            ad, opt = carry
            value, grads = jax.value_and_grad(lambda a: glance_loss(learner.logits(frozen, a), target))(ad)
            updates, opt = optimizer.update(grads, opt, ad)
            return (optax.apply_updates(ad, updates), opt), value

        (learned, opt_state), value = jax.lax.scan(inner, (learned, opt_state), None, config.inner_steps)
        logits = learner.logits(frozen, learned)
        return learned, opt_state, {"loss": value[-1], "kl": losses.exact_kl(logits, ref).mean(), "logits": logits}

    return update


def train_glance(config: GlanceConfig, out: str | Path, model=None, progress=print):
    """Run (or resume) `config` into OUT; returns (learned parameters, history). Checkpoints after every step.

    `model`: the LLM's `GlanceModel` (or a learner, `glance_learner`); None for `config.learner == "table"`.
    OUT holds the checkpoint (the parameters, optimizer, what play has shown, the history) and curves.png.
    """
    from .train import load_checkpoint, save_checkpoint, write_curves

    learner = as_learner(model, config)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env, bot_params, policy, policy_params = squad_setup(
        config.scenario, config.policy, config.bots, decision_period_s=GLANCE_PERIOD_S
    )
    optimizer = optax.adam(config.lr)
    learned = learner.init(config.seed)
    opt_state = optimizer.init(learned)
    # What play has shown so far: each (cell, answer)'s advantage summed, and the groups asked, both decayed.
    seen = (jnp.zeros((NUM_GLANCE_CELLS, NUM_TAGS)), jnp.zeros((NUM_GLANCE_CELLS,)))
    start, history = 0, []
    resumed = load_checkpoint(out, (learned, (opt_state, seen)), config)
    if resumed is not None:
        start, (learned, (opt_state, seen)), history = resumed
        progress(f"resuming {out} at step {start}/{config.steps}")
    collect = jax.jit(make_collect(env, bot_params[config.bots[0]], policy, learner, config))
    update = jax.jit(make_update(learner, config, optimizer))
    for step in range(start, config.steps):
        began = time.perf_counter()
        key = training_key(config.seed, step)
        parts = {
            bot: collect(learned, learner.frozen, policy_params, bot_params[bot], jax.random.fold_in(key, i))
            for i, bot in enumerate(config.bots)
        }
        # Each (cell, answer)'s advantage is a mean over the groups that asked about the cell, recent ones
        # weighing more: the other cells' answers, and so the value of an answer, change as the model learns.
        seen = (
            config.memory * seen[0] + sum(a for a, _, _ in parts.values()),
            config.memory * seen[1] + sum(n for _, n, _ in parts.values()),
        )
        advantage = seen[0] / jnp.maximum(seen[1], 1e-6)[:, None]
        learned, opt_state, stats = update(learned, opt_state, learner.frozen, advantage)
        record = step_record(step, parts, stats, began)
        history.append(record)
        save_checkpoint(out, step + 1, learned, (opt_state, seen), history, config)
        wins = " ".join(f"{bot} {100 * w:.0f}%" for bot, w in record["lane_win"].items())
        progress(
            f"step {step + 1}/{config.steps}: the played lanes win {wins}; groups that reached their cell "
            f"{100 * record['reached_groups']:.0f}%, whose outcomes differed "
            f"{100 * record['informative_groups']:.0f}%; KL {record['kl']:.3f}, "
            f"entropy {record['entropy_bits']:.2f} bits; table {record['table']} ({record['seconds']} s)"
        )
    steps = [h["step"] for h in history]
    panels = [(f"{bot}: the played lanes' win", steps, [h["lane_win"][bot] for h in history]) for bot in config.bots]
    panels += [("KL to the reference", steps, [h["kl"] for h in history])]
    panels += [("answer entropy (bits)", steps, [h["entropy_bits"] for h in history])]
    write_curves(out, panels, f"the glance prompt: {learner.noun} learns from the game")
    return learned, history


def step_record(step: int, parts: dict, stats: dict, began: float) -> dict:
    """A step's line of the history: per bot the played lanes' win, the groups' shares, the groups that asked
    about each cell (over the bots), the loss, the KL, the answers' entropy and the greedy table."""
    probs = jax.nn.softmax(stats["logits"], -1)
    return {
        "step": step + 1,
        "lane_win": {bot: float(s["win"]) for bot, (_, _, s) in parts.items()},
        "informative_groups": float(np.mean([float(s["informative"]) for _, _, s in parts.values()])),
        "reached_groups": float(np.mean([float(s["reached"]) for _, _, s in parts.values()])),
        "asked": [int(n) for n in np.asarray(sum(n for _, n, _ in parts.values()))],
        "loss": float(stats["loss"]),
        "kl": float(stats["kl"]),
        "entropy_bits": float(-(probs * jnp.log2(jnp.maximum(probs, 1e-12))).sum(-1).mean()),
        "table": "".join(str(t) for t in greedy_table(probs)),
        "seconds": round(time.perf_counter() - began, 1),
    }
