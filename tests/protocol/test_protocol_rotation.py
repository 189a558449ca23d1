"""Combination R, the tags in a fixed rotation: registered by its module alone, played as the runner plays
`schedule_tags`, reported in its own section. Episodes are cut to three decision periods (15 s)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args
from jaxarena.protocol.combinations import get, names, sections
from jaxarena.protocol.combinations.r import ROTATION
from jaxarena.protocol.policies import policy_env_id, policy_shaping, resolve_policy
from jaxarena.runner import make_runner
from jaxarena.tag_sources import schedule_tags

CONFIG = ProtocolConfig(episodes=3, seed=3, bots=("evasive",), combinations=("R",), num_periods=3, n_boot=200)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    summary = evaluate(CONFIG, out, "r", progress=False, figures=False, cache_path=None)
    return {"summary": summary, "dir": out / "r"}


def test_the_registry_and_the_command_line_know_r():
    assert "R" in names() and get("R").name == "R"
    assert config_from_args(build_parser().parse_args(["--combinations", "A", "r"])).combinations == ("A", "R")
    assert "R: B's policy with the tags in a fixed rotation" in " ".join(build_parser().format_help().split())
    assert [s.key for s in sections(CONFIG)] == ["rotation"]


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_r_plays_the_rotation_as_the_runner_does(run):
    cell = json.loads((run["dir"] / "cells" / "R_evasive.json").read_text())
    policy, params, _, _ = resolve_policy("B")
    env, env_params = jaxarena.make(policy_env_id(policy), bot="evasive", **policy_shaping(policy))
    rollout = make_runner(env, env_params, policy, schedule_tags(ROTATION), 3, num_periods=3)
    result = rollout(params, env_params, jnp.asarray(np.asarray(cell["key"], np.uint32)))
    e = cell["episodes"]
    assert e["outcome"] == np.asarray(result.outcome).tolist()
    assert e["tag_steps"] == np.asarray(result.tag_steps).tolist()
    for steps, duration in zip(e["tag_steps"], e["duration_s"], strict=True):
        # One tag per 5 s period, in turn: tag t played 50 ticks unless the episode ended in its period.
        assert steps[3] == 0 and sum(steps) == round(duration / 0.1)
        assert all(later == 0 or earlier == 50 for earlier, later in zip(steps, steps[1:], strict=False))
    assert cell["fingerprint"]["rotation"] == list(ROTATION) and cell["decisions"] == []


def test_r_has_its_rows_and_its_section(run):
    s = run["summary"]
    rows = (run["dir"] / "episodes.csv").read_text().splitlines()
    assert len(rows) == 1 + CONFIG.episodes and all(r.startswith("R,evasive,") for r in rows[1:])
    section = s["rotation"]
    assert section["by_bot"]["evasive"]["win_pct"] == s["descriptive"]["R"]["evasive"]["npc_win_pct"]
    assert "vs_B" not in section["by_bot"]["evasive"]  # no B in this run
    assert "### Rotation (R)" in (run["dir"] / "report.md").read_text()
    assert s["policies"]["R"]["spec"] == "B"
