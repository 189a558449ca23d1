"""Combination C (the RL selector) and its ablations in the protocol, end to end on a small budget.

Real pieces throughout: the shipped B squad, the shipped strategy table of the embedded
SmolLM2, and real selectors: the shipped ones where they exist, else three tiny ones trained
here (one PPO update each: their choices are arbitrary, which is all these tests need).
Episodes are cut to a few decision periods.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.llm.history import OPPONENT_CLASSES
from jaxarena.names import BOT_TYPES, NUM_TAGS
from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args, default_run_id
from jaxarena.protocol.combinations.c import C_ABLATIONS, COptions, played_labels, selector_cells
from jaxarena.protocol.combinations.c.cells import selector_checksum, selector_directory
from jaxarena.protocol.combinations.c.summary import bias, deduction_accuracy, entropy_bits, tag_distribution, versus_b
from jaxarena.protocol.runner import ProtocolRunner

LABELS = ["C", *(f"C-{a}" for a in C_ABLATIONS)]
SHIPPED = {"selector": "C", "selector_nodeduction": "C-nodeduction", "selector_scripted": "C-scripted"}
TRAINING = {
    "selector": {},
    "selector_nodeduction": {"deduction": False},
    "selector_scripted": {"population": "scripted"},
}


@pytest.fixture(scope="module")
def selectors(tmp_path_factory):
    """The `COptions` fields naming C's three selectors: the shipped ones, else tiny ones trained here."""
    from jaxarena.selector.train import shipped_selectors

    if all(name in shipped_selectors() for name in SHIPPED.values()):
        return dict(SHIPPED)
    from jaxarena.selector.train import SelectorConfig, train

    root = tmp_path_factory.mktemp("selectors")
    out = {}
    for field, overrides in TRAINING.items():
        config = SelectorConfig(
            num_envs=8, num_steps=8, total_decisions=64, chunk_updates=1, learned_slots=0, **overrides
        )
        train(config, root / field, progress=False)
        out[field] = str(root / field)
    return out


def _config(selectors, c_options: dict | None = None, **overrides) -> ProtocolConfig:
    base = dict(
        episodes=3,
        seed=5,
        combinations=("B", "C"),
        num_periods=3,
        n_boot=300,
        llm_path="host",  # the graph path would compile the LLM into B's program: minutes for nothing here
        options={"C": COptions(**selectors, **(c_options or {}))},
    )
    return ProtocolConfig(**(base | overrides))


def _with_c(config: ProtocolConfig, **changes) -> ProtocolConfig:
    """`config` with C's options changed."""
    return dataclasses.replace(config, options={"C": dataclasses.replace(config.options_of("C"), **changes)})


class SimulatedKill(Exception):
    pass


@pytest.fixture(scope="module")
def run(selectors, tmp_path_factory):
    """One run of B, C and every ablation, killed after C-N1_evasive and resumed."""
    out = tmp_path_factory.mktemp("results")
    config = _config(selectors)

    def kill(name, cell):
        if name == "C-N1_evasive":
            raise SimulatedKill(name)

    with pytest.raises(SimulatedKill):
        evaluate(config, out, "r1", progress=False, figures=False, after_cell=kill)
    summary = evaluate(config, out, "r1", progress=False)
    run_dir = out / "r1"
    cells = {p.stem: json.loads(p.read_text()) for p in (run_dir / "cells").glob("*.json")}
    decisions = [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()]
    return {"config": config, "out": out, "dir": run_dir, "summary": summary, "cells": cells, "decisions": decisions}


@pytest.mark.slow
def test_every_label_has_a_cell_per_bot_on_the_paired_keys(run):
    config, cells = run["config"], run["cells"]
    assert set(cells) == {f"{label}_{bot}" for label in ["B", *LABELS] for bot in BOT_TYPES}
    t = run["summary"]["timings"]
    assert "C-N1_evasive" in t["loaded_cells"] and "C-N1_balanced" in t["computed_cells"]
    rows = list(csv.DictReader((run["dir"] / "episodes.csv").open()))
    for bot in BOT_TYPES:
        keys = {
            label: [r["episode_key"] for r in rows if r["combination"] == label and r["bot"] == bot]
            for label in ["B", *LABELS]
        }
        assert all(len(k) == config.episodes for k in keys.values())
        assert all(k == keys["B"] for k in keys.values())  # paired with B episode for episode
        assert all(cells[f"{label}_{bot}"]["key"] == cells[f"B_{bot}"]["key"] for label in LABELS)


@pytest.mark.slow
def test_fingerprints_name_the_selector_the_table_and_the_chooser(run, selectors):
    from jaxarena.llm.strategy_table import load_table

    fp = {label: run["cells"][f"{label}_balanced"]["fingerprint"] for label in LABELS}
    for label, field in zip(("C", "C-nodeduction", "C-scripted"), SHIPPED, strict=True):
        assert fp[label]["chooser"] == "selector"
        assert fp[label]["selector"] == selector_checksum(selector_directory(selectors[field]))
    assert len({fp[label]["selector"] for label in ("C", "C-nodeduction", "C-scripted")}) == 3
    for label, chooser in (("C-N1", "top1"), ("C-llm", "llm"), ("C-random", "random")):
        assert fp[label]["chooser"] == chooser and "selector" not in fp[label]
    # C-N1 reads the table as C does, but may take only the first candidate.
    assert fp["C-N1"]["inputs"] == {**fp["C"]["inputs"], "num_candidates": 1}
    assert fp["C"]["inputs"]["num_candidates"] != 1
    assert fp["C-nodeduction"]["inputs"]["deduction"] is False and fp["C"]["inputs"]["deduction"] is True
    table = load_table(fp["C"]["table"]["name"])
    assert fp["C"]["table"]["prompts_sha256"] == table.metadata.prompts_sha256
    assert len(fp["C"]["table"]["arrays_sha256"]) == 64
    # Every C label plays its selector's squad policy.
    squads = {label: ProtocolRunner(run["config"], run["dir"], progress=False).policy(label)[2] for label in LABELS}
    assert all(f["policy"] == squads[label] for label, f in fp.items())
    differs = run["summary"]["selector"]["squad_differs_from_B"]
    b_policy = run["cells"]["B_balanced"]["fingerprint"]["policy"]
    assert differs == [label for label in LABELS if squads[label] != b_policy]


@pytest.mark.slow
def test_stored_c_cells_are_refused_under_another_selector(run, selectors):
    other = _with_c(run["config"], selector=selectors["selector_scripted"])
    runner = ProtocolRunner(other, run["dir"], progress=False)
    with pytest.raises(RuntimeError, match="different configuration"):
        runner.load_cell("C", "balanced")
    # The ablations without a network depend on C's squad, table and inputs only, which these share.
    assert runner.load_cell("C-llm", "balanced") is not None
    assert runner.load_cell("B", "balanced") is not None
    wrong = ProtocolRunner(
        _with_c(run["config"], selector_nodeduction=selectors["selector"]), run["dir"], progress=False
    )
    with pytest.raises(ValueError, match="deduction"):
        wrong.fingerprint("C-nodeduction")


@pytest.mark.slow
def test_decision_records_follow_the_chooser(run):
    by_label = {label: [d for d in run["decisions"] if d["combination"] == label] for label in LABELS}
    for label, records in by_label.items():
        assert records, label
        for d in records:
            assert d["tag"] == d["candidates"][d["choice"]] and d["top1"] == d["candidates"][0]
            assert 0 <= d["tag"] < NUM_TAGS and d["truth"] in range(len(OPPONENT_CLASSES))
            chex.assert_trees_all_close(sum(d["deduction"]), 1.0, atol=1e-3)
            if d["bot"] == "aggressive":
                assert d["truth"] == 0
            elif d["bot"] == "evasive":
                assert d["truth"] == 1
            else:
                assert d["truth"] in (2, 3)
    assert all(d["choice"] == 0 for d in by_label["C-N1"])
    for d in by_label["C-llm"]:
        assert d["choice"] == int(np.argmax(d["candidate_probs"]))
    for d in by_label["C-nodeduction"]:  # switched off: uniform, and not reported as a deduction
        np.testing.assert_allclose(d["deduction"], 0.25)
    assert "deduction" not in run["summary"]["selector"]["by_bot"]["balanced"]["C-nodeduction"]
    # The records are the decisions the episodes made: one per period an episode ran.
    for bot in BOT_TYPES:
        cell = run["cells"][f"C_{bot}"]
        assert len(cell["decisions"]) == sum(
            min(run["config"].num_periods, int(np.ceil(s / 5.0 - 1e-6))) for s in cell["episodes"]["duration_s"]
        )


@pytest.mark.slow
def test_n1_plays_the_tables_first_candidate(run):
    """C-N1 (chooser top1, N = 1) equals a tag source written here from the table lookups alone:
    push the decision point, deduce, propose, take the first candidate."""
    import jaxarena
    from jaxarena.llm.history import HISTORY_LEN, NUM_POINT_FEATURES, DecisionHistory, push
    from jaxarena.llm.strategy_table import assess, load_table, propose
    from jaxarena.protocol.policies import policy_env_id, resolve_policy
    from jaxarena.runner import make_runner
    from jaxarena.tag_sources import CarryTagSource

    config = run["config"]
    fp = run["cells"]["C-N1_balanced"]["fingerprint"]
    table, style = load_table(fp["table"]["name"]), fp["inputs"]["style"]
    assert fp["inputs"]["deduction"]

    def init(n):
        points = jnp.zeros((n, HISTORY_LEN, NUM_POINT_FEATURES))
        return DecisionHistory(points, jnp.zeros((n, HISTORY_LEN), bool), jnp.zeros((n, 2)), jnp.zeros((n, 2)))

    def first_candidate(histories, state, params, features, prev_tags, done, time_s, key):
        histories = jax.vmap(push, in_axes=(0, 0, None))(histories, state, params)
        assessment = jax.vmap(lambda h: assess(table, h))(histories)
        tags, _ = jax.vmap(propose, in_axes=(None, 0, 0, None, None))(table, features, assessment, params, style)
        return tags[:, 0], None, histories

    squad = selector_cells(ProtocolRunner(config, run["dir"], progress=False).context).squad_spec("C-N1")
    policy, params, _, _ = resolve_policy(squad)
    for bot in BOT_TYPES:
        cell = run["cells"][f"C-N1_{bot}"]
        env, env_params = jaxarena.make(policy_env_id(policy), bot=bot, shaping_weight=1.0, scenario=config.scenario)
        source = CarryTagSource(init=init, fn=first_candidate, reads_state=True)
        runner = make_runner(env, env_params, policy, source, config.episodes, num_periods=config.num_periods)
        result = runner(params, env_params, jnp.asarray(np.asarray(cell["key"], np.uint32)))
        e = cell["episodes"]
        assert e["outcome"] == np.asarray(result.outcome).tolist()
        np.testing.assert_allclose(e["duration_s"], np.asarray(result.duration_s), atol=1e-4)
        np.testing.assert_allclose(e["damage_dealt"], np.asarray(result.damage_dealt), atol=1e-3)
        assert e["tag_steps"] == np.asarray(result.tag_steps).tolist()
        mine = [(d["episode"], d["period"], d["tag"]) for d in cell["decisions"]]
        theirs = [(d["episode"], d["period"], d["tag"]) for d in result.decisions()]
        assert sorted(mine) == sorted(theirs)


@pytest.mark.slow
def test_a_recomputed_cell_is_identical(run):
    """C-random draws its choices from the cell's key: a fresh runner gets the same episodes and choices."""
    fresh = ProtocolRunner(run["config"], run["out"] / "again", progress=False)
    cell = fresh.run_cell("C-random", "balanced")
    stored = run["cells"]["C-random_balanced"]
    assert cell["episodes"] == stored["episodes"] and cell["decisions"] == stored["decisions"]


@pytest.mark.slow
def test_summary_report_and_figures(run):
    s, run_dir = run["summary"]["selector"], run["dir"]
    assert s["labels"] == LABELS and s["scenario"] == "paper"
    report = (run_dir / "report.md").read_text()
    assert "### Combination C." in report and "Mann–Whitney vs B" in report
    for label in LABELS:
        assert f"- **{label}**:" in report and f"| Balanced | {label} |" in report
        assert s["variants"][label]["chooser"] in ("selector", "top1", "llm", "random")
    assert s["variants"]["C-N1"]["choosable"] == 1 and s["variants"]["C"]["choosable"] > 1
    episodes = {(c["combination"], c["bot"]): c["episodes"] for c in run["cells"].values()}
    for bot in BOT_TYPES:
        rows = s["by_bot"][bot]
        assert list(rows) == ["B", *LABELS]
        for label in LABELS:
            r = rows[label]
            mw = r["vs_B"]["mann_whitney"]
            assert {"U", "p", "r", "r_rb", "direction", "stars"} <= set(mw)
            assert mw["n1"] == mw["n2"] == run["config"].episodes
            won = np.asarray(episodes[(label, bot)]["outcome"]) == 1
            b_won = np.asarray(episodes[("B", bot)]["outcome"]) == 1
            assert r["vs_B"]["win_pct_points"] == pytest.approx(100 * (won.mean() - b_won.mean()))
            mine = [d for d in run["decisions"] if d["combination"] == label and d["bot"] == bot]
            counts = np.bincount([d["tag"] for d in mine], minlength=NUM_TAGS)
            p = counts[counts > 0] / counts.sum()
            assert r["tags"]["counts"] == counts.tolist()
            assert r["tags"]["entropy_bits"] == pytest.approx(float(-(p * np.log2(p)).sum()))
            assert r["bias"]["llm_top1"]["counts"] == np.bincount([d["top1"] for d in mine], minlength=4).tolist()
            if "deduction" in r:
                exact = np.mean([d["deduced"] == d["truth"] for d in mine])
                assert r["deduction"]["class_pct"] == pytest.approx(100 * exact)
                assert r["deduction"]["style_pct"] >= r["deduction"]["class_pct"]
    figures = {"figC1_win_rates.png", "figC2_tags.png", "figC3_llm_top1_vs_selector.png"}
    assert figures <= set(run["summary"]["figures"])
    for name in figures:
        assert (run_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_price_c_prices_every_c_decision(selectors, tmp_path):
    k = 2
    config = _config(
        selectors,
        {"ablations": (), "price": True},
        combinations=("C",),
        bots=("balanced",),
        episodes=2,
        num_periods=2,
        oracle_rollouts=k,
    )
    s = evaluate(config, tmp_path, "priced", progress=False, figures=False, cache_path=None)
    records = [json.loads(line) for line in (tmp_path / "priced" / "decisions.jsonl").read_text().splitlines()]
    assert records and {r["combination"] for r in records} == {"C"}
    for r in records:
        win = np.asarray(r["oracle_win"])
        chex.assert_shape(win, (NUM_TAGS,))
        np.testing.assert_allclose(win * k, np.round(win * k), atol=1e-5)
        assert r["regret"] == pytest.approx(win.max() - win[r["tag"]], abs=1e-6)
    regret = s["selector"]["by_bot"]["balanced"]["C"]["regret"]
    assert regret["decisions"] == len(records)
    assert regret["mean_regret"] == pytest.approx(np.mean([r["regret"] for r in records]))
    cell = json.loads((tmp_path / "priced" / "cells" / "C_balanced.json").read_text())
    assert cell["fingerprint"]["pricing"] == {"rollouts": k} and cell["timing"]["pricing"]["states"] == len(records)
    assert "| Balanced | C | " in (tmp_path / "priced" / "report.md").read_text().split("Regret against the oracle")[1]


# -- fast: configuration, command line and the summary's arithmetic --


def test_config_expands_c_into_its_ablations():
    config = ProtocolConfig(combinations=("A", "C", "O"), bots=("evasive",))
    assert config.labels() == ["A", *LABELS, "O"]
    assert config.cells() == [(label, "evasive") for label in ["A", *LABELS, "O"]]
    none = ProtocolConfig(combinations=("C",), options={"C": COptions(ablations=())})
    assert none.labels() == ["C"] and played_labels(none) == ["C"] and played_labels(ProtocolConfig()) == []
    with pytest.raises(ValueError, match="choose from"):
        ProtocolConfig(combinations=("C",), options={"C": {"ablations": ("N2",)}})
    with pytest.raises(ValueError, match="add C"):
        ProtocolConfig(combinations=("A", "B"), options={"C": COptions(price=True)})
    with pytest.raises(ValueError, match="COptions"):
        ProtocolConfig(combinations=("C",), options={"C": ("N1",)})
    # Stored as data (summary.json's config), the options read back as they were.
    config = ProtocolConfig(combinations=("B", "C"), options={"C": COptions(ablations=("llm",))})
    assert ProtocolConfig(**json.loads(json.dumps(config.as_dict()))).options == config.options


def test_c_options_leave_run_ids_without_c_unchanged():
    assert default_run_id(ProtocolConfig()) == "embedded-n100-seed0-b687561c"
    assert default_run_id(ProtocolConfig(options={"C": {"selector": "elsewhere"}})) == "embedded-n100-seed0-b687561c"
    with_c = ProtocolConfig(combinations=("A", "B", "C"))
    # The id a run with C had before C's settings were its options: its stored run is found again.
    assert default_run_id(with_c) == "embedded-n100-seed0-b199f991"
    assert default_run_id(with_c) != default_run_id(_with_c(with_c, selector="elsewhere"))
    assert default_run_id(with_c) != default_run_id(_with_c(with_c, ablations=("N1",)))


def test_cli_parses_the_c_options():
    parser = build_parser()
    config = config_from_args(parser.parse_args(["--combinations", "A", "B", "c"]))
    assert config.combinations == ("A", "B", "C") and config.options_of("C") == COptions()
    assert config.options_of("C").ablations == C_ABLATIONS and config.options_of("C").selector == "C"
    args = ["--combinations", "C", "--c-ablations", "n1,llm", "--selector", "runs/c", "--price-c"]
    config = config_from_args(parser.parse_args(args))
    assert config.options_of("C") == COptions(selector="runs/c", ablations=("N1", "llm"), price=True)
    none = config_from_args(parser.parse_args(["--combinations", "C", "--c-ablations", "none"]))
    assert none.options_of("C").ablations == ()
    with pytest.raises(ValueError, match="unknown C ablation"):
        config_from_args(parser.parse_args(["--combinations", "C", "--c-ablations", "N1,oracle"]))


def test_entropy_and_bias_by_hand():
    assert entropy_bits([5, 5, 0, 0]) == pytest.approx(1.0)
    assert entropy_bits([1, 1, 1, 1]) == pytest.approx(2.0)
    assert entropy_bits([7, 0, 0, 0]) == 0.0 and np.isnan(entropy_bits([0, 0, 0, 0]))
    assert tag_distribution([1, 1, 2, 2])["entropy_bits"] == pytest.approx(1.0)
    # The LLM proposes Aggressive first every time; the chooser takes Flank in 1 of 4.
    records = [{"top1": 1, "tag": t} for t in (1, 1, 1, 2)]
    b = bias(records)
    assert b["llm_top1"]["counts"] == [0, 4, 0, 0] and b["chosen"]["counts"] == [0, 3, 1, 0]
    assert b["tv_distance"] == pytest.approx(0.25) and b["not_top1_pct"] == pytest.approx(25.0)
    assert b["llm_top1"]["entropy_bits"] == 0.0 and b["chosen"]["entropy_bits"] == pytest.approx(0.8112781)


def test_deduction_accuracy_by_hand():
    # Truth balanced_attacking (2) throughout; deduced 2, 3, 0, 2: exact 2 of 4, style 3 of 4.
    records = [{"episode": e, "truth": 2, "deduced": d} for e, d in ((0, 2), (0, 3), (1, 0), (1, 2))]
    d = deduction_accuracy(records, n_boot=200, seed=0)
    assert d["class_pct"] == pytest.approx(50.0) and d["style_pct"] == pytest.approx(75.0)
    assert d["confusion"][2] == [1, 0, 2, 1] and sum(map(sum, d["confusion"])) == 4
    assert d["deduced"] == [1, 0, 2, 1]
    lo, hi = d["style_ci95"]
    assert 50.0 <= lo <= 75.0 <= hi <= 100.0


def test_versus_b_on_identical_episodes_is_no_difference():
    episodes = {"outcome": [1, 3, 1, 2], "duration_s": [10.0, 120.0, 30.5, 44.0]}
    cell = {"episodes": episodes}
    v = versus_b(cell, cell, "C-llm", n_boot=100, seed=0)
    assert v["win_pct_points"] == 0.0 and v["ci95"] == [0.0, 0.0]
    assert v["mann_whitney"]["direction"] == "no difference" and v["mann_whitney"]["p"] == pytest.approx(1.0)
    shorter = {"episodes": {"outcome": [1, 1, 1, 1], "duration_s": [5.0, 6.0, 7.0, 8.0]}}
    v = versus_b(cell, shorter, "C", n_boot=100, seed=0)
    assert v["mann_whitney"]["direction"] == "C shorter" and v["win_pct_points"] == pytest.approx(50.0)


def test_selector_directory_finds_shipped_names_and_run_directories(tmp_path):
    from jaxarena.selector import train

    assert selector_directory(str(tmp_path)) == tmp_path
    assert selector_directory("C") == Path(train.__file__).parent / "pretrained" / "C"
    with pytest.raises(FileNotFoundError, match="shipped selectors: C"):
        selector_directory("no-such-selector")
