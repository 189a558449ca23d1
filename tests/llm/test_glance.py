"""The glance prompt: its cells, the tag source that reads a table per episode, the trainer's credit and loss."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.llm.deduction import approach_bin, distance_bin
from jaxarena.llm.glance import (
    EARLY_S,
    GLANCE_PERIOD_S,
    NUM_GLANCE_CELLS,
    cell_parts,
    glance_prompts,
    glance_source,
    initial_carry,
)
from jaxarena.llm.history import APPROACH, HISTORY_LEN, NEAREST, NUM_POINT_FEATURES, DecisionHistory, push
from jaxarena.llm.lora import init_adapter
from jaxarena.llm.tuning.glance import GlanceConfig, credit, glance_loss, target_probs, visited_cells
from jaxarena.names import NUM_ACTIONS, NUM_TAGS
from jaxarena.runner import Start, make_runner

PERIODS = 12


def _rollout(tables, episodes: int = 4):
    """Squads that stand still against the aggressive bot, a glance every 0.2 s, every decision state kept."""
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    params = params.replace(decision_period_s=GLANCE_PERIOD_S)
    run = make_runner(
        env,
        params,
        lambda p, o, k: jnp.zeros(5, jnp.int32),
        glance_source(),
        episodes,
        num_periods=PERIODS,
        record_states=True,
    )
    return run(None, params, jax.random.key(0), tag_state=initial_carry(tables, episodes)), params


def test_every_cell_has_its_own_prompt_naming_its_time_distance_and_approach():
    prompts = glance_prompts()
    assert len(prompts) == len(set(prompts)) == NUM_GLANCE_CELLS
    parts = {cell_parts(c) for c in range(NUM_GLANCE_CELLS)}
    assert len(parts) == NUM_GLANCE_CELLS
    assert "under 1.4 s" in prompts[0] and "1.4 s or more" in prompts[-1]
    assert "moved away" in prompts[0] and "moved toward" in prompts[-1]


def test_each_episode_answers_from_its_own_table_at_the_cell_its_glance_falls_in():
    tables = np.random.default_rng(0).integers(0, NUM_TAGS, (4, NUM_GLANCE_CELLS))
    result, params = _rollout(tables)
    tags, cells = np.asarray(result.decision_tags), np.asarray(result.decision_aux)
    chex.assert_shape([tags, cells], (PERIODS, 4))
    # The cells recomputed on the host from the recorded decision states.
    for n in range(4):
        history = DecisionHistory(
            jnp.zeros((HISTORY_LEN, NUM_POINT_FEATURES)), jnp.zeros(HISTORY_LEN, bool), jnp.zeros(2), jnp.zeros(2)
        )
        for p in range(PERIODS):
            history = push(history, jax.tree.map(lambda x, p=p, n=n: x[p, n], result.decision_states), params)
            later = round(p * GLANCE_PERIOD_S / params.dt) >= round(EARLY_S / params.dt)  # in whole ticks
            point = history.points[-1]
            expected = cell_parts(cells[p, n])
            assert expected == (int(later), int(distance_bin(point[NEAREST])), int(approach_bin(point[APPROACH])))
            assert tags[p, n] == tables[n, cells[p, n]]
    assert len(set(cells.ravel())) > 2  # the bot charged: the glances moved through cells
    assert set(cells[-1] // (NUM_GLANCE_CELLS // 2)) == {1}  # 2.2 s: every glance is in the later half


def test_a_bad_table_is_refused():
    with pytest.raises(ValueError, match="tags must be in 0..3"):
        initial_carry(np.full(NUM_GLANCE_CELLS, 4), 2)
    with pytest.raises(ValueError, match="shape"):
        initial_carry(np.zeros(NUM_GLANCE_CELLS - 1), 2)
    with pytest.raises(ValueError, match="group must be a multiple of 4"):
        GlanceConfig(group=6)
    with pytest.raises(ValueError, match="bots must be"):
        GlanceConfig(bots=("robot",))


def test_visited_cells_are_the_cells_each_episode_glanced_in_while_it_ran():
    import dataclasses

    tables = np.stack([np.full(NUM_GLANCE_CELLS, 1), np.full(NUM_GLANCE_CELLS, 3), np.full(NUM_GLANCE_CELLS, 1)])
    result, _ = _rollout(tables, episodes=3)
    cells, active = np.asarray(result.decision_aux), np.asarray(result.decision_active)
    seen = np.asarray(visited_cells(result))
    chex.assert_shape(seen, (3, NUM_GLANCE_CELLS))
    for episode in range(3):
        assert set(np.flatnonzero(seen[episode])) == set(cells[active[:, episode], episode])
    assert seen[:, : NUM_GLANCE_CELLS // 2].any(1).all() and seen[:, NUM_GLANCE_CELLS // 2 :].any(1).all()
    # A decision the runner marks as not made (the episode had ended) does not count.
    ended = dataclasses.replace(result, decision_active=result.decision_active.at[:, 1].set(False))
    assert not np.asarray(visited_cells(ended))[1].any() and np.asarray(visited_cells(ended))[0].any()


def test_a_glance_run_asks_about_any_cell_or_a_visited_one_and_nothing_else():
    import json

    from jaxarena.llm.adapters import ADAPTERS_DIR

    assert GlanceConfig().ask == "any" and GlanceConfig(ask="visited").to_json()["ask"] == "visited"
    # The shipped adapter's run, recorded before the rule existed, is today's default recipe (so it resumes).
    card = json.loads((ADAPTERS_DIR / "smollm2-raid-glance" / "card.json").read_text())
    assert card["config"] == GlanceConfig().to_json()
    assert card["config"] != GlanceConfig(ask="visited").to_json()
    with pytest.raises(ValueError, match="ask must be one of any, visited"):
        GlanceConfig(ask="seen")


def test_credit_averages_each_answers_advantage_over_the_groups_that_asked_its_cell():
    rng = np.random.default_rng(1)
    spawns, group = 6, 8
    focus = np.array([2, 5, 2, 0, 5, 2])
    answers = np.tile(np.arange(NUM_TAGS), (spawns, group // NUM_TAGS))
    advantages = rng.normal(size=(spawns, group)).astype(np.float32)
    advantage, asked = credit(jnp.asarray(focus), jnp.asarray(answers), jnp.asarray(advantages))
    chex.assert_shape(advantage, (NUM_GLANCE_CELLS, NUM_TAGS))
    expected = np.zeros((NUM_GLANCE_CELLS, NUM_TAGS))
    for s, cell in enumerate(focus):
        for g in range(group):
            expected[cell, answers[s, g]] += advantages[s, g] / (group // NUM_TAGS)
    np.testing.assert_allclose(np.asarray(advantage), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(asked), np.bincount(focus, minlength=NUM_GLANCE_CELLS))


def test_the_target_moves_the_base_models_answers_by_the_advantage_and_the_loss_fits_it():
    rng = np.random.default_rng(2)
    ref = jnp.asarray(rng.normal(size=(3, NUM_TAGS)), jnp.float32)
    advantage = jnp.asarray([[0.0] * 4, [0.0, 0.0, 0.0, 1.0], [0.5, -0.5, 0.0, 0.0]], jnp.float32)
    target = np.asarray(target_probs(ref, advantage, beta=0.25))
    base = np.exp(np.asarray(ref)) / np.exp(np.asarray(ref)).sum(-1, keepdims=True)
    np.testing.assert_allclose(target[0], base[0], rtol=1e-5)  # never asked: the base model's answers
    by_hand = base * np.exp(np.asarray(advantage) / 0.25)
    np.testing.assert_allclose(target, by_hand / by_hand.sum(-1, keepdims=True), rtol=1e-5)
    # The loss is the cross-entropy, smallest where the model answers as the target.
    logits = jnp.asarray(rng.normal(size=(3, NUM_TAGS)), jnp.float32)
    p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(-1, keepdims=True)
    assert float(glance_loss(logits, jnp.asarray(target))) == pytest.approx(
        -np.mean(np.sum(target * np.log(p), -1)), rel=1e-5
    )
    assert float(glance_loss(jnp.log(jnp.asarray(target)), jnp.asarray(target))) < float(
        glance_loss(logits, jnp.asarray(target))
    )


def test_lanes_with_one_key_play_one_game_until_their_answers_differ():
    """What a training group relies on: one spawn and one set of random numbers, so only the asked answer matters."""
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    params = params.replace(decision_period_s=GLANCE_PERIOD_S)
    # A squad that acts at random: its lanes' games part unless they share their random numbers.
    random_squad = lambda p, o, k: jax.random.randint(k, (5,), 0, NUM_ACTIONS)  # noqa: E731
    run = make_runner(env, params, random_squad, glance_source(), 3, num_periods=PERIODS)
    base = np.full(NUM_GLANCE_CELLS, 1)
    unseen = base.copy()
    unseen[NUM_GLANCE_CELLS // 2 :] = 3  # later cells: this rollout ends at 2.4 s, its later glances differ...
    first = base.copy()
    first[:] = 3  # ... and this one answers Retreat from the first glance on
    tables = np.stack([base, unseen, first])
    _, spawn = env.reset(jax.random.key(1), params)
    start = Start(jax.tree.map(lambda x: jnp.stack([x] * 3), spawn), jnp.int32(0))
    keys = jnp.stack([jax.random.key(7)] * 3)
    result = run(None, params, jax.random.key(0), start=start, tag_state=initial_carry(tables, 3), episode_keys=keys)
    tags = np.asarray(result.decision_tags)
    early = round(EARLY_S / GLANCE_PERIOD_S)
    np.testing.assert_array_equal(tags[:early, 0], tags[:early, 1])  # the same glances before the tables differ
    assert np.all(tags[:, 2] == 3) and not np.all(tags[:, 0] == 3)
    # Common random numbers: with no key given, the lanes draw apart even on one table.
    free = run(None, params, jax.random.key(0), start=start, tag_state=initial_carry(np.stack([base] * 3), 3))
    same = run(
        None,
        params,
        jax.random.key(0),
        start=start,
        tag_state=initial_carry(np.stack([base] * 3), 3),
        episode_keys=keys,
    )
    same_pos = np.asarray(same.final_state.npc_pos)
    np.testing.assert_array_equal(same_pos[0], same_pos[1])
    assert not np.array_equal(np.asarray(free.final_state.npc_pos)[0], np.asarray(free.final_state.npc_pos)[1])


@pytest.fixture(scope="module")
def glance_model():
    from embedded_common import generator

    from jaxarena.llm.glance_model import GlanceModel
    from jaxarena.llm.lora import LoraConfig

    return GlanceModel(generator("bf16"), LoraConfig(rank=4, targets=("q", "v")))


@pytest.mark.slow  # the embedded model's forward and backward over the 18 prompts (~20 s on 2 cores)
def test_the_update_teaches_the_model_an_answer_per_cell_from_advantages(glance_model):
    import optax

    from jaxarena.llm.glance_model import greedy_table
    from jaxarena.llm.tuning.glance import make_update

    model = glance_model
    zero = init_adapter(model.cfg, model.lora, jax.random.key(0))
    np.testing.assert_array_equal(  # a zero adapter is the base model, exactly
        np.asarray(model.logits(model.base, zero)), np.asarray(model.logits(model.base, None))
    )
    assert set(greedy_table(model.logits(model.base, None))) == {1}  # the stock model: Aggressive everywhere
    # The rule: Retreat where the bot moved toward the squad in the first 1.4 s, else Aggressive.
    rule = np.where([cell_parts(c)[0] == 0 and cell_parts(c)[2] == 2 for c in range(NUM_GLANCE_CELLS)], 3, 1)
    advantage = jnp.asarray(np.eye(NUM_TAGS)[rule] - 0.25, jnp.float32)
    config = GlanceConfig(lr=1e-3, inner_steps=1)
    optimizer = optax.adam(config.lr)
    update = jax.jit(make_update(model, config, optimizer))
    adapter, opt_state = zero, optimizer.init(zero)
    for _ in range(15):
        adapter, opt_state, stats = update(adapter, opt_state, model.base, advantage)
    np.testing.assert_array_equal(greedy_table(model.logits(model.base, adapter)), rule)
    assert float(stats["kl"]) > 0.0


def test_a_glance_adapter_is_refused_where_a_table_10_adapter_is_expected(tmp_path):
    import json

    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.lora import AdapterError

    (tmp_path / "card.json").write_text(json.dumps({"kind": "glance-adapter"}))
    with pytest.raises(AdapterError, match="glance prompt"):
        resolve_adapter(str(tmp_path), kind="llm-adapter")
    assert resolve_adapter(str(tmp_path), kind="glance-adapter") == tmp_path.resolve()


@pytest.mark.long  # three tiny training runs and a report on the shipped raid squad (~4 min on 2 cores)
def test_a_run_resumes_where_it_stopped_and_reports_against_always_aggressive(glance_model, tmp_path):
    import json

    from jaxarena.llm.tuning.glance import train_glance
    from jaxarena.llm.tuning.glance_report import finish, markdown

    small = dict(bots=("aggressive",), spawns=1, group=4)
    lines = []
    train_glance(GlanceConfig(steps=1, **small), tmp_path, glance_model, progress=lines.append)
    adapter, history = train_glance(GlanceConfig(steps=2, **small), tmp_path, glance_model, progress=lines.append)
    assert any("resuming" in line and "step 1/2" in line for line in lines)
    # Resume is bit-exact: stopping after step 1 and resuming ends where two steps in one go end.
    straight, _ = train_glance(GlanceConfig(steps=2, **small), tmp_path / "run2", glance_model, progress=lines.append)
    chex.assert_trees_all_equal(adapter, straight)
    start = init_adapter(glance_model.cfg, glance_model.lora, jax.random.PRNGKey(0))
    moved = jax.tree.map(lambda a, b: not np.array_equal(a, b), adapter, start)
    assert any(jax.tree.leaves(moved))  # and the two steps moved the adapter: the equality is not the untrained one
    assert [h["step"] for h in history] == [1, 2] and (tmp_path / "curves.png").is_file()
    with pytest.raises(ValueError, match="another config"):
        train_glance(GlanceConfig(steps=2, lr=1e-3, **small), tmp_path, glance_model, progress=lines.append)
    result = finish(glance_model, adapter, GlanceConfig(steps=2, **small), tmp_path, history, episodes=4, n_boot=100)
    rows = result["readers"]
    assert rows["always Aggressive"]["aggressive"]["tag_shares"]["Aggressive"] == 1.0
    assert rows["stock LLM"]["aggressive"]["minus_always_aggressive"] == [0.0, 0.0, 0.0]  # it answers Aggressive
    diff = rows["tuned LLM"]["aggressive"]["minus_stock_llm"]
    assert diff[1] <= diff[0] <= diff[2] and len(result["cells"]) == NUM_GLANCE_CELLS
    card = json.loads((tmp_path / "adapter" / "card.json").read_text())
    assert card["kind"] == "glance-adapter" and card["steps"] == 2
    played = card["played"]["by_bot"]["aggressive"]
    assert played["tuned_win_pct"] == rows["tuned LLM"]["aggressive"]["win_pct"]
    assert played["stock_ci95"] == rows["stock LLM"]["aggressive"]["win_ci"]
    assert "| tuned LLM |" in markdown(result)


@pytest.mark.slow  # one tiny training step with its scout lanes (~3 min on 2 cores)
def test_asking_about_visited_cells_wastes_no_group(glance_model, tmp_path):
    from jaxarena.llm.tuning.glance import train_glance

    config = GlanceConfig(steps=1, bots=("balanced",), spawns=8, group=4, ask="visited")
    lines = []
    _, history = train_glance(config, tmp_path, glance_model, progress=lines.append)
    # Every group's lanes glanced in the cell it asked about: the scout saw the group's own game.
    assert history[0]["reached_groups"] == 1.0
    assert "groups that reached their cell 100%" in lines[-1]  # and the progress line says so


@pytest.mark.slow  # loads the embedded model and answers the 18 prompts (~30 s on 2 cores)
def test_the_shipped_glance_adapter_loads_by_name_and_answers_as_its_card_records():
    import json

    from jaxarena.llm.adapters import ADAPTERS_DIR
    from jaxarena.llm.glance_model import load_glance_table
    from jaxarena.names import TAG_NAMES

    table, checksum = load_glance_table("smollm2-raid-glance")
    card = json.loads((ADAPTERS_DIR / "smollm2-raid-glance" / "card.json").read_text())
    assert [TAG_NAMES[t] for t in table] == card["played"]["table"] and checksum == card["checksum"]
    assert {"Retreat", "Flank"} <= set(card["played"]["table"])  # what play taught it, beside Aggressive
