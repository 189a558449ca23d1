"""The population of opponents the selector trains against, after
"Language Agents with Reinforcement Learning for Strategic Play in the Werewolf Game".

A `Population` is K arenas' `EnvParams` stacked on a leading axis, with a
sampling weight each; every training episode draws its opponent from it. Its
members are:

- the three scripted bots (`scripted_members`), which alone are the
  "scripted-only" ablation, the Werewolf agents' self-play analogue;
- scripted variants (`variant_members`): faster and slower bots, balanced
  bots that switch mode more or less often, and the scenario presets;
- RL-trained bots (`jaxarena.learned_bot`), in slots reserved up front and
  filled with the bot trainer's checkpoints as training goes on. An empty
  slot has weight 0, so filling one changes values, never shapes, and the
  training program is compiled once.

All members share one pytree structure: when the population has learned-bot
slots, every member carries bot weights (the scripted ones ignore theirs).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import struct

from jaxarena.names import BOT_LEARNED, BOT_TYPES
from jaxarena.scenarios import scenario_overrides
from jaxarena.types import EnvParams

#: Scripted variants: (name suffix, overrides), applied to each scripted bot.
SPEED_VARIANTS = (("slow", 0.8), ("fast", 1.2))
PHASE_VARIANTS = (("quick-switch", (3.0, 9.0)), ("slow-switch", (12.0, 30.0)))
VARIANT_SCENARIOS = ("headroom", "cleave")


@struct.dataclass
class Population:
    params: EnvParams  # leaves (K, ...)
    weights: jax.Array  # (K,) float32 sampling weights; 0 marks an empty slot
    names: tuple[str, ...] = struct.field(pytree_node=False)

    @property
    def size(self) -> int:
        return len(self.names)

    def sample(self, key: jax.Array) -> tuple[EnvParams, jax.Array]:
        """One member's params and its index, drawn by weight."""
        index = jax.random.choice(key, self.size, p=self.weights / jnp.sum(self.weights))
        return jax.tree.map(lambda x: x[index], self.params), index

    @property
    def learned_filled(self) -> int:
        """How many learned-bot slots hold a checkpoint (they fill in order)."""
        learned = [i for i, name in enumerate(self.names) if name.startswith("learned")]
        return int(sum(float(self.weights[i]) > 0 for i in learned))

    def with_learned_bot(self, slot: int, bot_weights) -> Population:
        """The population with learned-bot slot `slot` (0-based among the learned slots) holding `bot_weights`."""
        slots = [i for i, name in enumerate(self.names) if name.startswith("learned")]
        if not 0 <= slot < len(slots):
            raise ValueError(f"learned slot {slot} out of range: the population has {len(slots)}")
        i = slots[slot]
        params = self.params.replace(
            bot_weights=jax.tree.map(lambda all_w, w: all_w.at[i].set(w), self.params.bot_weights, bot_weights)
        )
        return self.replace(params=params, weights=self.weights.at[i].set(1.0))


def scripted_members(base: EnvParams) -> list[tuple[str, EnvParams]]:
    """The three scripted bots on `base`."""
    return [(name, base.replace(bot_type=jnp.int32(i))) for i, name in enumerate(BOT_TYPES)]


def variant_members(base: EnvParams) -> list[tuple[str, EnvParams]]:
    """Scripted variants: each bot faster and slower, the balanced bot's phase lengths, and the presets."""
    members = []
    for i, bot in enumerate(BOT_TYPES):
        scripted = base.replace(bot_type=jnp.int32(i))
        for suffix, factor in SPEED_VARIANTS:
            members.append((f"{bot}/{suffix}", scripted.replace(bot_speed=scripted.bot_speed * factor)))
        for scenario in VARIANT_SCENARIOS:
            overrides = {k: jnp.asarray(v, jnp.float32) for k, v in scenario_overrides(scenario).items()}
            members.append((f"{bot}/{scenario}", scripted.replace(**overrides)))
    balanced = base.replace(bot_type=jnp.int32(BOT_TYPES.index("balanced")))
    for suffix, (lo, hi) in PHASE_VARIANTS:
        members.append(
            (
                f"balanced/{suffix}",
                balanced.replace(balanced_phase_min_s=jnp.float32(lo), balanced_phase_max_s=jnp.float32(hi)),
            )
        )
    return members


def make_population(
    base: EnvParams,
    *,
    variants: bool = True,
    learned_slots: int = 0,
    bot_weights_template=None,
) -> Population:
    """The scripted bots, optionally their variants, and `learned_slots` empty learned-bot slots.

    `bot_weights_template` (any learned bot's `BotWeights`, e.g. `init_bot_weights`) fixes the slots'
    shapes; it is required when `learned_slots` > 0.
    """
    members = scripted_members(base) + (variant_members(base) if variants else [])
    if learned_slots:
        if bot_weights_template is None:
            raise ValueError("learned_slots > 0 needs bot_weights_template (the learned bot's BotWeights)")
        zeros = jax.tree.map(jnp.zeros_like, bot_weights_template)
        members = [(name, p.replace(bot_weights=zeros)) for name, p in members]
        learned = base.replace(bot_type=jnp.int32(BOT_LEARNED), bot_weights=zeros)
        members += [(f"learned/{k}", learned) for k in range(learned_slots)]
    return stack_members(members, filled=len(members) - learned_slots)


def stack_members(members: Sequence[tuple[str, EnvParams]], filled: int | None = None) -> Population:
    """Stacks named members into a `Population`; the first `filled` get weight 1, the rest 0."""
    if not members:
        raise ValueError("a population needs at least one member")
    names = tuple(name for name, _ in members)
    if len(set(names)) != len(names):
        raise ValueError(f"population member names repeat: {names}")
    as_arrays = [jax.tree.map(jnp.asarray, p) for _, p in members]
    params = jax.tree.map(lambda *xs: jnp.stack(xs), *as_arrays)
    filled = len(members) if filled is None else filled
    weights = (jnp.arange(len(members)) < filled).astype(jnp.float32)
    return Population(params=params, weights=weights, names=names)
