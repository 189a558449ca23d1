"""Where each random stream starts: one constant per stream, folded into the seed's key.

The protocol evaluates on `fold_in(PRNGKey(seed), bot index)`, bot indices 0..2, and episode i of a
cell spawns from `fold_in(split(cell key, episodes)[i], 0)` (`jaxarena.runner`). A training stream
that split or folded the bare `PRNGKey(seed)` would draw some of those same keys (under
`jax_threefry_partitionable`, `split(k, n)[i]` equals `fold_in(k, i)`), and so could train on the
very episodes the protocol later reports. Every training stream therefore starts from
`fold_in(key(seed), STREAM)` with a constant of its own, far from 0..2, and the protocol never folds
any of these constants into a seed's key. `tests/test_key_streams.py` checks the spawns themselves:
no episode any training stream below plays, for seeds 0-19, starts where a protocol episode of
seeds 0-19 starts, under either setting of `jax_threefry_partitionable`.

The streams, all here (the modules named use these values under their own names):

| constant | folded into `key(seed)` by |
|---|---|
| `PPO_STREAM` | PPO's runs: `jaxarena-train` (one run or `--seeds`), the time-to-policy benchmark (`training_key`) |
| `SELECTOR_STREAM` | the RL selector's runs, `jaxarena-train-selector` (`selector_key`) |
| `LEARNED_BOT_STREAM` | the learned bot the selector's population trains against (`learned_bot_key`) |
| `DATA_STREAM` | the tag model's decision datasets, then the part index (`llm.tuning.data.part_key`) |
| `GRPO_STREAM` | the tag model's GRPO steps, then the step (`llm.tuning.train.grpo_key`) |
| `GLANCE_STREAM` | the glance model's steps: `GLANCE_STREAM + step` (`llm.tuning.glance.training_key`) |

`GLANCE_STREAM` starts a range, one constant per step; every other constant lies below it.

The coder's scorer (`jaxarena.coder.batch_rollout`) folds no constant: it keys episode e against bot b
as `fold_in(fold_in(key(seed), b), e)` (with partitionable keys, the protocol's episode key), but a lane
resets from a split of it (`jaxarena.coder.lanes`), so no scored episode starts where a protocol
episode does (checked with the others).

Within one key, streams of their own keep draws apart from the episodes' keys (which fold 0, 1, ...):
the runner's tag source folds 0x7FFFFFFF into the batch's key (`jaxarena.runner`), the learned bot's
action sampling folds 0x1EA54ED into its tick's key (`jaxarena.learned_bot`), and the protocol prices a
cell's decisions on `fold_in(cell key, PRICING_STREAM)` (`jaxarena.protocol.pricing`).
"""

from __future__ import annotations

import jax

#: PPO's training runs: `jaxarena-train` (one run or `--seeds`), the time-to-policy benchmark.
PPO_STREAM = 0x5EED0
#: The RL selector's training runs.
SELECTOR_STREAM = 0x5E1EC
#: The learned bot the selector's population trains against.
LEARNED_BOT_STREAM = 0xB0715
#: The tag model's decision datasets (format 2; format 1 folded the part index straight into `key(seed)`,
#: so parts 0-2 of seed 0 replayed the protocol's seed-0 cells).
DATA_STREAM = 0xDA7A
#: The tag model's GRPO steps.
GRPO_STREAM = 0x6B0
#: The glance model's training steps, one constant per step from here up.
GLANCE_STREAM = 1 << 20

#: Every stream constant folded into a seed's key, by name.
STREAMS = {
    "PPO_STREAM": PPO_STREAM,
    "SELECTOR_STREAM": SELECTOR_STREAM,
    "LEARNED_BOT_STREAM": LEARNED_BOT_STREAM,
    "DATA_STREAM": DATA_STREAM,
    "GRPO_STREAM": GRPO_STREAM,
    "GLANCE_STREAM": GLANCE_STREAM,
}


def stream_key(seed: int, stream: int) -> jax.Array:
    """The raw uint32 key where `stream` starts for `seed`: `fold_in(PRNGKey(seed), stream)`."""
    return jax.random.fold_in(jax.random.PRNGKey(int(seed)), stream)


def training_key(seed: int) -> jax.Array:
    """The key a PPO run of seed `seed` starts from (its network init, its arenas, its samples)."""
    return stream_key(seed, PPO_STREAM)


def selector_key(seed: int) -> jax.Array:
    """The key an RL selector run of seed `seed` starts from."""
    return stream_key(seed, SELECTOR_STREAM)


def learned_bot_key(seed: int) -> jax.Array:
    """The key the learned bot of a selector run of seed `seed` trains from."""
    return stream_key(seed, LEARNED_BOT_STREAM)
