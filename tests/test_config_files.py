"""Config files and parsed arguments, read into config dataclasses the one way."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from jaxarena.coder.loop_config import LoopConfig
from jaxarena.config_files import config_from, load_config
from jaxarena.llm.tuning.grpo import GRPOConfig
from jaxarena.llm.tuning.train import TrainConfig


@dataclasses.dataclass(frozen=True)
class Settings:
    rounds: int = 3
    bots: tuple[str, ...] = ("aggressive",)
    note: str | None = None


def test_parsed_arguments_fill_the_fields_they_name_and_lists_become_tuples():
    args = argparse.Namespace(rounds=5, bots=["evasive", "balanced"], out="runs/x")  # out is no field
    assert config_from(Settings, args) == Settings(rounds=5, bots=("evasive", "balanced"))
    assert config_from(Settings, argparse.Namespace()) == Settings()  # what the source lacks keeps its default


def test_changes_win_over_the_source_and_an_unknown_change_is_refused():
    args = argparse.Namespace(rounds=5, note="flag")
    assert config_from(Settings, args, note=None) == Settings(rounds=5)
    with pytest.raises(TypeError, match=r"Settings has no fields \['roundz'\]"):
        config_from(Settings, args, roundz=1)


def test_a_config_reads_the_fields_it_shares_with_another():
    train = TrainConfig(method="grpo", batch=12, group=4, inner_steps=3, clip_eps=0.1, kl_coef=0.5, lr=3e-4)
    grpo = config_from(GRPOConfig, train, states=train.batch)
    assert grpo == GRPOConfig(episodes=32, states=12, group=4, inner_steps=3, clip_eps=0.1, kl_coef=0.5, lr=3e-4)


def test_every_config_dataclass_loads_back_from_the_json_it_dumps(tmp_path):
    for config in (
        Settings(rounds=7, bots=("evasive", "balanced")),
        LoopConfig(k=2, bots=("balanced",)),
        TrainConfig(),
    ):
        path = tmp_path / f"{type(config).__name__}.json"
        path.write_text(json.dumps(dataclasses.asdict(config)))
        assert load_config(type(config), path) == config
