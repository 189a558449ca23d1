"""No key the tag model trains on is a key the protocol evaluates on.

The protocol's cell keys fold a bot index (0..2) straight into the seed's key; every training
stream folds its own constant in first. Checked on the keys themselves, for many seeds.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxarena.llm.tuning.data import SOURCES, SPLITS, DataConfig, part_key
from jaxarena.llm.tuning.glance import training_key
from jaxarena.llm.tuning.train import grpo_key
from jaxarena.names import BOT_TYPES
from jaxarena.protocol.config import cell_key_data


def _raw(key) -> tuple[int, ...]:
    key = jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return tuple(int(x) for x in np.asarray(key).ravel())


def _evaluation_keys(seeds) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in cell_key_data(seed, bot)) for seed in seeds for bot in BOT_TYPES}


def test_no_dataset_part_key_of_any_seed_is_an_evaluation_key():
    config = DataConfig()
    parts = [config.part_index(b, sp, so) for b in BOT_TYPES for sp in SPLITS for so in SOURCES]
    assert sorted(parts) == list(range(len(parts)))  # every part, once
    training = {_raw(part_key(seed, part)) for seed in range(10) for part in parts}
    assert len(training) == 10 * len(parts)
    assert not training & _evaluation_keys(range(100))


def test_no_grpo_or_glance_training_key_is_an_evaluation_key():
    training = {_raw(grpo_key(seed)) for seed in range(10)}
    training |= {_raw(training_key(seed, step)) for seed in range(10) for step in range(0, 400, 7)}
    assert not training & _evaluation_keys(range(100))


def test_the_check_sees_a_collision_where_there_is_one():
    # The keys the dataset used before its stream constant: part p of seed s was fold_in(key(s), p),
    # and parts 0-2 of seed 0 were the protocol's seed-0 cells.
    old = {_raw(jax.random.fold_in(jax.random.key(0), part)) for part in range(3)}
    assert old <= _evaluation_keys([0])
