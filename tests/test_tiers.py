"""The test tiers: every test module has a registered layer marker, and `-m core` is the env and its API."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import LAYER_OF_FOLDER, LAYER_OF_MODULE, layer_of

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def registered_markers() -> set[str]:
    lines = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    return {line.split(":", 1)[0] for line in lines}


def test_every_test_module_has_a_registered_layer():
    markers = registered_markers()
    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(modules) > 50
    unknown = {str(m.relative_to(ROOT)): layer_of(m) for m in modules if layer_of(m) not in markers}
    assert not unknown, f"layers without a marker in pyproject.toml: {unknown}"
    assert set(LAYER_OF_FOLDER.values()) | set(LAYER_OF_MODULE.values()) <= markers


def test_core_is_the_env_and_its_api():
    core = {m.stem for m in (ROOT / "tests").glob("test_*.py") if layer_of(m) == "core"}
    assert {"test_api", "test_conformance", "test_rules", "test_spaces", "test_wrappers"} <= core
    assert not core & {"test_oracle", "test_zoo", "test_cli_errors", "test_docs"}
    for folder in LAYER_OF_FOLDER:
        assert all(layer_of(m) != "core" for m in (ROOT / "tests" / folder).glob("test_*.py"))
