"""Combination G, B's squad under the LLM answering the glance prompt every 0.2 s: with a zero adapter the
stock model answers Aggressive to every glance, so G plays B (the stock LLM answers Aggressive every 5 s)
episode for episode. Episodes are cut to 3 of B's periods (15 s)."""

from __future__ import annotations

import dataclasses
import json

import jax
import pytest

from jaxarena.llm.lora import LoraConfig, init_adapter, save_adapter
from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args
from jaxarena.protocol.combinations import get, names


def test_the_registry_and_the_command_line_know_g():
    assert "G" in names() and get("G").name == "G"
    args = build_parser().parse_args(["--combinations", "B", "g", "--glance-adapter", "x"])
    config = config_from_args(args)
    assert config.combinations == ("B", "G") and config.options_of("G").adapter == "x"
    assert config.options_of("L").adapter is None and "L" not in config.options
    with pytest.raises(ValueError, match="--glance-adapter"):
        ProtocolConfig(combinations=("G",))
    # Without G, its adapter does not enter the run id.
    assert "glance_adapter" not in ProtocolConfig(combinations=("A",), options={"G": {"adapter": "x"}}).identity_dict()


@pytest.mark.slow  # B's LLM and G's table on the embedded model, 15 s episodes (~1 min on 2 cores)
def test_a_zero_glance_adapter_plays_b_episode_for_episode(tmp_path):
    from jaxarena.llm.weights import find_gguf, load_model

    try:
        find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    loaded = load_model()
    lora = LoraConfig(rank=2, targets=("q", "v"))
    zero = init_adapter(loaded.config, lora, jax.random.key(0))
    card = {"kind": "glance-adapter", "method": "test"}
    adapter = save_adapter(tmp_path / "zero", zero, lora, base_sha256=loaded.sha256, card=card)
    config = ProtocolConfig(
        episodes=4,
        seed=2,
        bots=("aggressive",),
        combinations=("B", "G"),
        num_periods=3,
        n_boot=200,
        llm_path="graph",
        options={"G": {"adapter": str(adapter)}},
    )
    summary = evaluate(config, tmp_path / "results", "g", progress=False, figures=False, cache_path=None)
    run = tmp_path / "results" / "g"
    cells = {c: json.loads((run / "cells" / f"{c}_aggressive.json").read_text()) for c in ("B", "G")}
    b, g = cells["B"]["episodes"], cells["G"]["episodes"]
    assert g["outcome"] == b["outcome"] and g["tag_steps"] == b["tag_steps"] and g["duration_s"] == b["duration_s"]
    assert cells["G"]["fingerprint"]["table"] == [1] * 18 and cells["G"]["fingerprint"]["decision_period_s"] == 0.2
    assert summary["glance_llm"]["by_bot"]["aggressive"]["vs_B"]["win_pct_points"] == 0.0
    assert "### Glance LLM (G)" in (run / "report.md").read_text()
    # A Table 10 adapter is refused by name before anything plays.
    other = save_adapter(tmp_path / "table10", zero, lora, base_sha256=loaded.sha256, card={"method": "test"})
    with pytest.raises(Exception, match="glance prompt"):
        evaluate(
            dataclasses.replace(config, combinations=("G",), options={"G": {"adapter": str(other)}}),
            tmp_path / "results",
            "g2",
            progress=False,
            figures=False,
            cache_path=None,
        )
