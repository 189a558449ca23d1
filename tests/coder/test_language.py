"""The language's vocabulary and reference: generated from the registries, printed verbatim in docs/coder.md."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena import names
from jaxarena.coder import limits
from jaxarena.coder.helpers import HELPERS
from jaxarena.coder.language import ACTIONS, BASELINES, CONSTANTS, EXAMPLE, FIELDS, RULES, reference_text
from jaxarena.coder.sandbox import check_program
from jaxarena.coder.sandbox_rules import RESERVED
from jaxarena.coder.translate import observation_record, translate
from jaxarena.types import EnvParams

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "coder.md"


def test_docs_contain_the_reference_verbatim():
    assert reference_text() in DOC.read_text(encoding="utf-8"), "regenerate the reference in docs/coder.md"


def test_the_reference_lists_every_action_field_constant_and_helper():
    text = reference_text()
    for name in (*ACTIONS, *CONSTANTS):
        assert f"`{name}`" in text
    for h in HELPERS.values():
        assert f"`{h.signature}` -> {h.returns}: {h.doc}" in text
    for kind, fields in FIELDS.items():
        if kind in ("obs", "point"):
            continue
        for field in fields:
            assert f"`.{field}`" in text
    for rule in RULES:
        assert rule in text
    assert f"N <= {limits.MAX_UNROLL}" in text


def test_action_codes_are_the_arena_codes():
    assert [name.lower() for name in ACTIONS] == list(names.ACTIONS)
    assert [code for code, _ in ACTIONS.values()] == list(range(names.NUM_ACTIONS))


def test_constants_are_the_default_arena_numbers():
    p = EnvParams()
    assert CONSTANTS["BOT_MAX_HP"][0] == float(p.bot_hp) == names.BOT_MAX_HP
    assert CONSTANTS["NPC_MELEE_RANGE"][0] == float(p.npc_melee_range)
    assert CONSTANTS["ORB_RANGE"][0] == float(p.orb_range)
    assert CONSTANTS["ARENA_SIZE"][0] == float(p.arena_size)


def test_documented_fields_are_exactly_the_observation_records():
    obs = observation_record(jnp.zeros((5, 23)))
    assert set(obs.v) == set(FIELDS["obs"])
    for kind, record in (("me", obs.v["me"]), ("bot", obs.v["bot"]), ("cover", obs.v["cover"])):
        assert set(record.v) == set(FIELDS[kind]), kind
    for ally in obs.v["allies"].v:
        assert set(ally.v) == set(FIELDS["ally"])
    point = HELPERS["point"].fn(None, *(observation_record(jnp.zeros((5, 23))).v["me"].v[k] for k in ("x", "z")))
    assert set(point.v) == set(FIELDS["point"])


def test_observation_record_denormalises_table_3():
    obs = np.zeros((5, 23), np.float32)
    obs[:, 0:3] = [0.5, 0.1, 0.5]  # me at (15, 3), 30 HP
    obs[:, 3:10] = [0.5, 0.9, 0.2, 24.0 / (30 * 2**0.5), 1.0, 0.5, 0.5]
    obs[:, 10:22] = np.tile([0.2, 0.1, 1.0], 4)
    obs[:, 12] = 0.0  # first ally dead
    obs[:, 22] = 2 / 3
    rec = observation_record(jnp.asarray(obs))
    me, bot = rec.v["me"].v, rec.v["bot"].v
    np.testing.assert_allclose([me["x"].v[0], me["z"].v[0], me["hp"].v[0]], [15, 3, 30], rtol=1e-6)
    np.testing.assert_allclose([bot["x"].v[0], bot["z"].v[0], bot["hp"].v[0]], [15, 27, 60], rtol=1e-6)
    np.testing.assert_allclose(bot["distance"].v, 24.0, rtol=1e-6)
    assert bool(bot["can_attack"].v.all())
    np.testing.assert_allclose(rec.v["cover"].v["distance"].v, 12.0, rtol=1e-6)  # (15, 15) from (15, 3)
    np.testing.assert_array_equal(rec.v["index"].v, np.arange(5))
    np.testing.assert_array_equal(rec.v["tag"].v, 2)
    allies = rec.v["allies"].v
    # Row i lists the others in index order, skipping i (jaxarena.observe.ALLY_INDEX).
    from jaxarena.observe import ALLY_INDEX

    np.testing.assert_array_equal(np.stack([a.v["index"].v for a in allies], -1), ALLY_INDEX)
    assert not bool(allies[0].v["alive"].v[0]) and bool(allies[1].v["alive"].v[0])


def test_the_example_and_the_baselines_compile_and_are_short():
    policy = translate(EXAMPLE)
    obs = jnp.zeros((5, 23)).at[:, 7].set(1.0)
    np.testing.assert_array_equal(policy(None, obs, jax.random.key(0)), names.MELEE)
    assert sorted(BASELINES) == ["kite", "rush", "surround_strike"]
    for name, source in BASELINES.items():
        check_program(source)
        assert len(source.splitlines()) < 40, name


def test_reserved_names_cover_the_vocabulary():
    assert set(ACTIONS) | set(CONSTANTS) | set(HELPERS) <= RESERVED
