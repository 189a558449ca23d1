"""Combination L, B's squad under the tuned LLM: with a zero adapter it is B exactly; a trained one is named
in the fingerprint, and the section reports L against B on the same episodes. Episodes are cut to 3 periods."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxarena.llm.lora import LoraConfig, init_adapter, save_adapter
from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import build_parser, config_from_args
from jaxarena.protocol.combinations import get, names


def _adapter(path, b_scale: float):
    """An adapter for the embedded model: B = 0 (the stock model exactly) or drawn (another model)."""
    from jaxarena.llm.weights import load_model

    loaded = load_model()
    lora = LoraConfig(rank=2, targets=("q", "v"))
    adapter = init_adapter(loaded.config, lora, jax.random.key(0))
    if b_scale:
        keys = iter(jax.random.split(jax.random.key(1), 2 * len(adapter)))
        adapter = tuple(
            {t: {"a": ab["a"], "b": b_scale * jax.random.normal(next(keys), ab["b"].shape)} for t, ab in layer.items()}
            for layer in adapter
        )
    return save_adapter(path, adapter, lora, base_sha256=loaded.sha256, card={"method": "test"})


@pytest.fixture(scope="module")
def zero_run(tmp_path_factory):
    from jaxarena.llm.weights import find_gguf

    try:
        find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("tuned")
    adapter = _adapter(root / "zero", 0.0)
    config = ProtocolConfig(
        episodes=4,
        seed=2,
        bots=("balanced",),
        combinations=("B", "L"),
        num_periods=3,
        n_boot=200,
        llm_path="graph",
        options={"L": {"adapter": str(adapter)}},
    )
    summary = evaluate(config, root / "results", "l", progress=False, figures=False, cache_path=None)
    return {"summary": summary, "dir": root / "results" / "l", "root": root}


def test_the_registry_and_the_command_line_know_l():
    assert "L" in names() and get("L").name == "L"
    args = build_parser().parse_args(["--combinations", "B", "l", "--tuned-adapter", "x"])
    config = config_from_args(args)
    assert config.combinations == ("B", "L") and config.options_of("L").adapter == "x" and config.adapter is None
    with pytest.raises(ValueError, match="--tuned-adapter"):
        ProtocolConfig(combinations=("L",))
    # Without L, its adapter does not enter the run id.
    assert "tuned_adapter" not in ProtocolConfig(combinations=("A",), options={"L": {"adapter": "x"}}).identity_dict()


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_a_zero_adapter_plays_b_episode_for_episode(zero_run):
    cells = {c: json.loads((zero_run["dir"] / "cells" / f"{c}_balanced.json").read_text()) for c in ("B", "L")}
    b, l_ = cells["B"]["episodes"], cells["L"]["episodes"]
    assert l_["outcome"] == b["outcome"] and l_["tag_steps"] == b["tag_steps"] and l_["duration_s"] == b["duration_s"]
    model_b = cells["B"]["fingerprint"]["llm"]["model"]
    model_l = cells["L"]["fingerprint"]["llm"]["model"]
    assert "+lora:" in model_l and "+lora:" not in model_b
    section = zero_run["summary"]["tuned_llm"]["by_bot"]["balanced"]
    assert section["vs_B"]["win_pct_points"] == 0.0
    assert np.isclose(sum(section["tag_share"]), 1.0)
    assert "### Tuned LLM (L)" in (zero_run["dir"] / "report.md").read_text()


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_another_adapter_is_another_cell(zero_run):
    drawn = _adapter(zero_run["root"] / "drawn", 0.5)
    card = json.loads((drawn / "card.json").read_text())
    zero = json.loads((zero_run["root"] / "zero" / "card.json").read_text())
    assert card["checksum"] != zero["checksum"]
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    assert EmbeddedBackend(adapter=str(drawn)).model.endswith(card["checksum"][:12])
    assert EmbeddedBackend(adapter=str(drawn)).model != EmbeddedBackend(adapter=str(zero_run["root"] / "zero")).model
