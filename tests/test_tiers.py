"""The test tiers: every test module has a registered layer marker, `-m core` is the env and its API, and the
slow and long markers stay out unless `-m` names them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import (
    LAYER_OF_FOLDER,
    LAYER_OF_MODULE,
    OPT_IN_MARKERS,
    layer_of,
    names_marker,
    pytest_collection_modifyitems,
)

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


# --- The opt-in markers: `slow` (CI's slow tier) and `long` (its longest checks, which CI skips) ---


class _Item:
    """Just enough of a collected test for conftest's hook: a path and a set of markers."""

    def __init__(self, name: str, *markers: str):
        self.name, self.path, self.markers = name, ROOT / "tests" / "test_api.py", set(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, mark):
        self.markers.add(mark.name)


class _Config:
    def __init__(self, markexpr: str):
        self.option = SimpleNamespace(markexpr=markexpr)
        self.deselected: list[str] = []
        self.hook = SimpleNamespace(pytest_deselected=lambda items: self.deselected.extend(i.name for i in items))


def _kept(markexpr: str) -> set[str]:
    items = [_Item("fast"), _Item("slow", "slow"), _Item("long", "long")]
    config = _Config(markexpr)
    pytest_collection_modifyitems(config, items)
    assert {i.name for i in items} | set(config.deselected) == {"fast", "slow", "long"}
    return {i.name for i in items}


@pytest.mark.parametrize(
    ("markexpr", "kept"),
    [
        ("", {"fast"}),
        ("core", {"fast"}),
        # Named in the expression: conftest keeps them, and pytest's own -m selection then decides.
        ("not slow and not long", {"fast", "slow", "long"}),
        ("slow", {"fast", "slow"}),
        ("long", {"fast", "long"}),
        ("slow or long", {"fast", "slow", "long"}),
        ("llm and long", {"fast", "long"}),
        ("longer", {"fast"}),  # a word, not a substring
    ],
)
def test_slow_and_long_tests_stay_out_unless_the_expression_names_them(markexpr, kept):
    assert _kept(markexpr) == kept
    assert names_marker(markexpr, "long") == ("long" in kept)


def test_long_is_registered_skipped_by_default_and_documented():
    assert {"slow", "long"} <= registered_markers()
    assert set(OPT_IN_MARKERS) == {"slow", "long"}
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "not slow and not long" in ini["addopts"]
    tests_section = (ROOT / "README.md").read_text().split("## Tests", 1)[1].split("\n## ", 1)[0]
    assert "python -m pytest -q -m slow" in tests_section and "python -m pytest -q -m long" in tests_section
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-m slow" in ci and "-m long" not in ci  # CI runs the slow tier and skips the long one


def _marks(decorators) -> set[str]:
    """The `pytest.mark.NAME` names among a node's decorators (or a `pytestmark = ...` value)."""
    names = set()
    for node in decorators:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
                names.add(sub.attr)
    return names


def test_no_test_is_both_slow_and_long_and_some_are_long():
    """`-m long` would drop a test marked both (conftest keeps slow ones out unless named), so the two are apart."""
    long_tests, both = [], []
    for module in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(module.read_text())
        module_marks = _marks(
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith(("test", "Test")):
                marks = _marks(node.decorator_list) | module_marks
                if "long" in marks:
                    long_tests.append(f"{module.name}::{node.name}")
                    if "slow" in marks:
                        both.append(long_tests[-1])
    assert long_tests, "no test carries the long marker"
    assert not both, f"marked both slow and long: {both}"
