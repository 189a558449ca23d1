"""A combination added from outside the package: one module (this one) and one test.

`H` plays B's squad holding one tag, its only option (`HoldOptions`, `--hold-tag`). The test
registers it, reads the option from the real command line, plays two short episodes with the
real runner and finds the option where it must have gone: the cell's fingerprint, the ticks
under each tag, the run's config and its id.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from jaxarena.names import NUM_TAGS
from jaxarena.protocol import combinations, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args, default_run_id
from jaxarena.protocol.combination import Combination, Played
from jaxarena.protocol.playing import arena, compile_rollout, episodes, timed_call
from jaxarena.protocol.runner import ProtocolRunner, StoredCellMismatch


@dataclasses.dataclass(frozen=True)
class HoldOptions:
    tag: int = 0

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument("--hold-tag", type=int, choices=range(NUM_TAGS), default=cls.tag, help="the tag H holds")

    @classmethod
    def from_args(cls, args) -> HoldOptions:
        return cls(tag=args.hold_tag)


def _play(context, label: str, bot: str, key, progress) -> Played:
    c, tag = context.config, context.config.options_of("H").tag
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    program, compile_s = context.program(label, lambda: compile_rollout(context, env, env_params, policy, params, tag))
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


HOLD = Combination(
    name="H",
    about="B's squad holding the tag --hold-tag",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=lambda context, label: {"tag": context.config.options_of("H").tag},
    options=HoldOptions,
)


@pytest.fixture
def registered(monkeypatch):
    """H in the registry for this test only."""
    monkeypatch.setattr(combinations, "_REGISTRY", dict(combinations.registry()))
    return combinations.register(HOLD)


def test_an_added_combination_takes_its_option_from_the_command_line_to_its_cells(registered, tmp_path):
    parser = build_parser()
    assert "Combination H:" in parser.format_help() and "--hold-tag" in parser.format_help()
    # A squad that never reads its tag keeps the compile short; the tag is still the one in force.
    argv = ["--combinations", "h", "--hold-tag", "2", "--policy-b", "scripted:focus_fire", "--bots", "evasive"]
    config = config_from_args(parser.parse_args(argv + ["--episodes", "2", "--n-boot", "100"]))
    assert config.options == {"H": HoldOptions(tag=2)}
    config = dataclasses.replace(config, num_periods=2)  # 10 s episodes
    summary = evaluate(config, tmp_path, "h", progress=False, figures=False, cache_path=None)
    cell = json.loads((tmp_path / "h" / "cells" / "H_evasive.json").read_text())
    assert cell["fingerprint"]["tag"] == 2
    ticks = np.asarray(cell["episodes"]["tag_steps"])
    assert ticks.shape == (2, NUM_TAGS) and ticks[:, 2].min() > 0 and ticks.sum() == ticks[:, 2].sum()
    assert summary["config"]["options"] == {"H": {"tag": 2}}
    # Another tag is another run: another default id, and this run's cells are refused for it.
    other = dataclasses.replace(config, options={"H": HoldOptions(tag=1)})
    assert default_run_id(other) != default_run_id(config)
    with pytest.raises(StoredCellMismatch, match="different configuration"):
        ProtocolRunner(other, tmp_path / "h", progress=False).load_cell("H", "evasive")
