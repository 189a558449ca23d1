"""The strategy table: the shipped one, its lookups in jitted code, files, errors, and a real rebuild."""

from __future__ import annotations

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from embedded_common import generator

import jaxarena
from jaxarena.llm.candidates import NO_ASSESSMENT, NUM_CANDIDATE_CELLS, candidate_cell
from jaxarena.llm.deduction import NUM_DEDUCTION_CELLS, deduction_cell
from jaxarena.llm.history import HISTORY_LEN, NUM_POINT_FEATURES, DecisionHistory
from jaxarena.llm.strategy_table import assess, build_table, deduce, load_table, propose, save_table, shipped_tables
from jaxarena.llm.table_asking import Asker, deduction_probs_for, iterative_chains_for, reply_probs, vanilla_probs_for
from jaxarena.llm.types import Reply

PARAMS = jaxarena.make("Arena-v0")[1]


@pytest.fixture(scope="module")
def table():
    return load_table("smollm2-135m")


def random_histories(n, seed=0):
    rng = np.random.default_rng(seed)
    points = np.zeros((n, HISTORY_LEN, NUM_POINT_FEATURES), np.float32)
    points[:, :, 0] = rng.uniform(0, 20, (n, HISTORY_LEN))
    points[:, :, 1] = rng.uniform(-1, 1, (n, HISTORY_LEN))
    seen = rng.integers(0, HISTORY_LEN + 1, n)
    valid = np.arange(HISTORY_LEN)[None] >= (HISTORY_LEN - seen)[:, None]
    return DecisionHistory(jnp.asarray(points), jnp.asarray(valid), jnp.zeros((n, 2)), jnp.zeros((n, 2)))


def random_features(n, seed=0):
    rng = np.random.default_rng(seed)
    cols = [rng.uniform(0, 300, n), rng.uniform(0, 60, n), rng.integers(1, 6, n), rng.integers(0, 2, n)]
    return jnp.asarray(np.stack(cols + [rng.uniform(0, 30, n)], axis=1), jnp.float32)


def test_shipped_table_is_well_formed(table):
    assert "smollm2-135m" in shipped_tables()
    chex.assert_shape(table.deduction_probs, (NUM_DEDUCTION_CELLS, 4))
    chex.assert_shape(table.vanilla_probs, (NUM_CANDIDATE_CELLS, 4))
    chex.assert_shape([table.iterative_tags, table.iterative_probs], (NUM_CANDIDATE_CELLS, 3))
    chex.assert_shape(table.iterative_repeats, (NUM_CANDIDATE_CELLS,))
    np.testing.assert_allclose(table.deduction_probs.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(table.vanilla_probs.sum(1), 1.0, rtol=1e-5)
    tags = np.asarray(table.iterative_tags)
    assert all(len(set(row)) == 3 for row in tags.tolist())
    assert np.all((table.iterative_repeats >= 0) & (table.iterative_repeats <= 2))
    # The chain's first proposal is the vanilla prompt's top tag, with that reply's probability.
    np.testing.assert_array_equal(tags[:, 0], np.argmax(table.vanilla_probs, 1))
    np.testing.assert_allclose(table.iterative_probs[:, 0], np.max(table.vanilla_probs, 1))
    meta = table.metadata
    assert (meta.backend, meta.model, meta.decode) == ("embedded", "SmolLM2-135M-Instruct.Q4_1", "choice")
    assert dict(meta.options)["temperature"] == 0.1 and dict(meta.options)["top_p"] == 0.9
    assert meta.build_seconds > 0 and not meta.errors and not meta.no_probs


def test_deduce_and_assess_jit_and_vmap(table):
    n = 40
    histories = random_histories(n)
    probs = jax.jit(jax.vmap(deduce, in_axes=(None, 0)))(table, histories)
    chex.assert_shape(probs, (n, 4))
    chex.assert_type(probs, jnp.float32)
    cells = np.asarray(jax.vmap(deduction_cell)(histories))
    np.testing.assert_array_equal(probs, np.asarray(table.deduction_probs)[cells])
    classes = jax.jit(jax.vmap(assess, in_axes=(None, 0)))(table, histories)
    chex.assert_type(classes, jnp.int32)
    np.testing.assert_array_equal(classes, np.argmax(np.asarray(table.deduction_probs)[cells], 1))


@pytest.mark.parametrize("style", ["vanilla", "iterative"])
def test_propose_jits_and_vmaps(table, style):
    n = 40
    feats = random_features(n)
    assessment = jnp.asarray(np.random.default_rng(1).integers(0, NO_ASSESSMENT + 1, n), jnp.int32)
    fn = jax.jit(jax.vmap(propose, in_axes=(None, 0, 0, None, None)), static_argnums=4)
    tags, probs = fn(table, feats, assessment, PARAMS, style)
    chex.assert_shape([tags, probs], (n, 3))
    chex.assert_type([tags, probs], [jnp.int32, jnp.float32])
    cells = np.asarray(jax.vmap(candidate_cell, in_axes=(0, 0, None))(feats, assessment, PARAMS))
    if style == "iterative":
        np.testing.assert_array_equal(tags, np.asarray(table.iterative_tags)[cells])
        np.testing.assert_array_equal(probs, np.asarray(table.iterative_probs)[cells])
    else:
        rows = np.asarray(table.vanilla_probs)[cells]
        np.testing.assert_array_equal(tags, np.argsort(-rows, axis=1, kind="stable")[:, :3])
        np.testing.assert_array_equal(probs, np.take_along_axis(rows, np.asarray(tags), 1))
        assert np.all(np.diff(np.asarray(probs), axis=1) <= 0)


def test_propose_rejects_an_unknown_style(table):
    with pytest.raises(ValueError, match="unknown candidate style 'greedy'; choose from vanilla, iterative"):
        propose(table, random_features(1)[0], 0, PARAMS, "greedy")


def test_missing_table_names_the_shipped_ones(tmp_path):
    with pytest.raises(FileNotFoundError, match="shipped tables: .*smollm2-135m"):
        load_table("no-such-table")
    with pytest.raises(FileNotFoundError, match="shipped tables"):
        load_table(tmp_path / "absent.npz")


def test_save_load_round_trip(table, tmp_path):
    changed = table.replace(vanilla_probs=np.roll(np.asarray(table.vanilla_probs), 1, axis=1))
    npz, meta = save_table(changed, tmp_path / "sub" / "t.npz")
    assert (npz.name, meta.name) == ("t.npz", "t.json")
    assert sorted(p.name for p in npz.parent.iterdir()) == ["t.json", "t.npz"]  # no temporary file left
    back = load_table(tmp_path / "sub" / "t")
    for field in ("deduction_probs", "vanilla_probs", "iterative_tags", "iterative_probs", "iterative_repeats"):
        np.testing.assert_array_equal(getattr(back, field), getattr(changed, field))
        assert np.asarray(getattr(back, field)).dtype == np.asarray(getattr(changed, field)).dtype
    assert back.metadata == table.metadata
    assert json.loads(meta.read_text())["prompts_sha256"] == table.metadata.prompts_sha256


def test_load_refuses_a_table_built_from_other_prompts(table, tmp_path):
    stale = table.replace(metadata=dataclasses.replace(table.metadata, prompts_sha256="0" * 64))
    save_table(stale, tmp_path / "stale")
    with pytest.raises(ValueError, match="other prompts"):
        load_table(tmp_path / "stale")
    assert load_table(tmp_path / "stale", check_prompts=False).metadata.prompts_sha256 == "0" * 64


def test_load_refuses_wrong_shapes(tmp_path):
    np.savez(tmp_path / "bad.npz", deduction_probs=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="deduction_probs should have shape"):
        load_table(tmp_path / "bad")


def test_replies_without_probabilities_are_recorded_not_raised():
    p, why = reply_probs(Reply("2", 0.1, None, (0.1, 0.2, 0.3, 0.4)), 4)
    assert why is None and np.allclose(p, [0.1, 0.2, 0.3, 0.4])
    # A choice from a backend that shows no distribution (Ollama), or an unusable one.
    for choice in (Reply("2", 0.1), Reply("2", 0.1, None, (float("nan"),) * 4)):
        p, why = reply_probs(choice, 4)
        assert why == "no_probs" and np.allclose(p, [0, 0, 1, 0])
    for bad in (Reply("", 40.0, "timeout"), Reply("Surround", 0.1), Reply("7", 0.1), Reply("", 0.1, None, (0.0,) * 4)):
        p, why = reply_probs(bad, 4)
        assert why == "error" and np.allclose(p, 0.25)


def test_build_needs_choice_decoding():
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    with pytest.raises(ValueError, match="needs choice decoding"):
        build_table(EmbeddedBackend(decode="free"), progress=False)


@pytest.mark.slow  # 13 s on an idle machine, 23 s at load average 7
def test_shipped_table_matches_a_fresh_rebuild_with_the_embedded_model(table):
    """A few random cells, put to the real model again, give the shipped answers.

    Batch and padding shapes differ from the build's, so bf16 rounding moves
    probabilities by up to ~0.005 (docs/llm.md); the tags must agree exactly.
    """
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    rng = np.random.default_rng(12)
    # The test suite's shared generator: the same model, loaded once for every embedded test.
    asker = Asker(EmbeddedBackend(generator=generator()), 0, progress=False)
    ded_cells = rng.choice(NUM_DEDUCTION_CELLS, 6, replace=False)
    np.testing.assert_allclose(
        deduction_probs_for(asker, ded_cells), np.asarray(table.deduction_probs)[ded_cells], atol=0.02
    )
    cand_cells = rng.choice(NUM_CANDIDATE_CELLS, 6, replace=False)
    vanilla = vanilla_probs_for(asker, cand_cells)
    np.testing.assert_allclose(vanilla, np.asarray(table.vanilla_probs)[cand_cells], atol=0.02)
    tags, probs, repeats = iterative_chains_for(asker, cand_cells[:1], vanilla[:1])
    np.testing.assert_array_equal(tags, np.asarray(table.iterative_tags)[cand_cells[:1]])
    np.testing.assert_allclose(probs, np.asarray(table.iterative_probs)[cand_cells[:1]], atol=0.02)
    np.testing.assert_array_equal(repeats, np.asarray(table.iterative_repeats)[cand_cells[:1]])
    assert not asker.errors and not asker.no_probs
