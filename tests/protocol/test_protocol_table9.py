"""Combination T, tags drawn at the paper's Table 9 frequencies: a tag source with a taste and no sight of
the game, registered by its module alone, played as the runner plays `frequency_tags`, reported beside B."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args
from jaxarena.protocol.combinations import get, names, sections
from jaxarena.protocol.combinations.t import WEIGHTS
from jaxarena.protocol.policies import policy_env_id, policy_shaping, resolve_policy
from jaxarena.runner import make_runner
from jaxarena.tag_sources import frequency_tags

CONFIG = ProtocolConfig(episodes=3, seed=3, bots=("balanced",), combinations=("B", "T"), num_periods=3, n_boot=200)


def test_frequency_tags_draw_each_tag_at_its_weight_every_period():
    draw = jax.jit(frequency_tags(WEIGHTS))
    prev, done, time_s = jnp.zeros(4000, jnp.int32), jnp.zeros(4000, bool), jnp.float32(5.0)
    tags = draw(None, prev, done, time_s, jax.random.PRNGKey(0))
    chex.assert_shape(tags, (4000,))
    chex.assert_type(tags, jnp.int32)
    shares = np.bincount(np.asarray(tags), minlength=4) / 4000
    np.testing.assert_allclose(shares, np.asarray(WEIGHTS) / sum(WEIGHTS), atol=0.02)  # 83.8 / 4.2 / 4.4 / 7.6%
    again = draw(None, prev, done, time_s, jax.random.PRNGKey(1))
    assert np.mean(np.asarray(again) != np.asarray(tags)) > 0.2  # drawn afresh, not held
    only_retreat = frequency_tags([0, 0, 0, 2.5])(None, prev, done, time_s, jax.random.PRNGKey(2))
    assert set(np.asarray(only_retreat).tolist()) == {3}
    for bad in ([0, 0, 0, 0], [1, -1, 0, 0], [[1, 2]], [1, float("nan")]):
        with pytest.raises(ValueError, match="weights"):
            frequency_tags(bad)


def test_the_registry_and_the_command_line_know_t_and_say_it_is_not_an_llm():
    assert "T" in names() and get("T").name == "T"
    assert config_from_args(build_parser().parse_args(["--combinations", "A", "t"])).combinations == ("A", "T")
    assert "T: B's policy with tags drawn at the paper's Table 9 frequencies" in " ".join(
        build_parser().format_help().split()
    )
    assert [s.key for s in sections(CONFIG)][-1] == "table9_chooser"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    summary = evaluate(CONFIG, out, "t", progress=False, figures=False, cache_path=None)
    return {"summary": summary, "dir": out / "t"}


@pytest.mark.slow  # B's LLM and T's program on the embedded model, 15 s episodes: over ~10 s on 2 cores
def test_t_plays_table9_draws_as_the_runner_does_and_is_reported_beside_b(run):
    cell = json.loads((run["dir"] / "cells" / "T_balanced.json").read_text())
    policy, params, _, _ = resolve_policy("B")
    env, env_params = jaxarena.make(policy_env_id(policy), bot="balanced", **policy_shaping(policy))
    rollout = make_runner(env, env_params, policy, frequency_tags(WEIGHTS), 3, num_periods=3)
    result = rollout(params, env_params, jnp.asarray(np.asarray(cell["key"], np.uint32)))
    assert cell["episodes"]["outcome"] == np.asarray(result.outcome).tolist()
    assert cell["episodes"]["tag_steps"] == np.asarray(result.tag_steps).tolist()
    assert cell["fingerprint"]["table9_counts"] == list(WEIGHTS) and cell["decisions"] == []
    s = run["summary"]
    section = s["table9_chooser"]
    assert section["counts"] == [2036, 103, 107, 184]
    entry = section["by_bot"]["balanced"]
    assert entry["win_pct"] == s["descriptive"]["T"]["balanced"]["npc_win_pct"]
    lo, hi = entry["vs_B"]["ci95"]  # B is in this run: T's paired difference from it
    assert lo <= entry["vs_B"]["win_pct_points"] <= hi
    report = (run["dir"] / "report.md").read_text()
    assert "### Table 9's chooser (T)" in report and "not an LLM" in report
