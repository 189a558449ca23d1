"""The committed notebooks carry the outputs of a full-size run, so a reader sees them without running.

Reads the .ipynb files only (no kernel): fast. tests/protocol/test_notebooks.py runs them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ("quickstart.ipynb", "reproduce_paper.ipynb")


def _notebook(name: str) -> dict:
    return json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _outputs(nb: dict, mime: str | None = None) -> list[dict]:
    outs = [o for c in _code_cells(nb) for o in c.get("outputs", [])]
    return outs if mime is None else [o for o in outs if mime in o.get("data", {})]


def _output_text(nb: dict) -> str:
    parts = []
    for o in _outputs(nb):
        parts.append(_text(o.get("text", "")))
        parts.extend(_text(v) for k, v in o.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)


def _is_install_guard(cell: dict) -> bool:
    # Silent where jaxarena is importable, as it was when the outputs were made.
    return 'find_spec("jaxarena") is None' in _text(cell["source"])


@pytest.mark.parametrize("name", NAMES)
def test_every_code_cell_ran_in_order_and_shows_output(name):
    cells = _code_cells(_notebook(name))
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(counts) + 1)), counts  # top to bottom, each once
    silent = [i for i, c in enumerate(cells) if not c.get("outputs") and not _is_install_guard(c)]
    assert silent == [], f"{name}: code cells {silent} have no output"


@pytest.mark.parametrize("name", NAMES)
def test_no_error_in_any_output(name):
    nb = _notebook(name)
    assert [o for o in _outputs(nb) if o["output_type"] == "error"] == []
    assert "Traceback (most recent call last)" not in _output_text(nb)


@pytest.mark.parametrize("name", NAMES)
def test_no_output_shows_a_path_of_the_machine_it_ran_on(name):
    # A reader's checkout lives elsewhere: outputs name packaged policies by their packaged name.
    text = _output_text(_notebook(name))
    found = re.findall(r"(?<![\w.])/(?:work|home|Users|tmp|root)/[\w./-]+", text)
    assert not found, found[:3]


@pytest.mark.parametrize("name", NAMES)
def test_committed_size_is_reasonable(name):
    assert (NOTEBOOKS / name).stat().st_size < 3_000_000


def test_quickstart_shows_the_learning_curve_and_the_episode_at_full_size():
    nb = _notebook("quickstart.ipynb")
    assert len(_outputs(nb, "image/png")) == 1  # the learning curve
    assert len(_outputs(nb, "image/gif")) == 1  # the episode
    text = _output_text(nb)
    assert "1024 episodes in" in text and "update  40" in text  # not the test suite's small budgets
    assert "| Aggressive | ours (n=100) |" in text  # the protocol's Table 6, 100 episodes per bot


def test_reproduce_paper_shows_five_figures_and_the_full_protocol():
    nb = _notebook("reproduce_paper.ipynb")
    assert len(_outputs(nb, "image/png")) == 5  # Figures 5-9
    text = _output_text(nb)
    assert "episodes=100" in text and "num_periods=None" in text
    assert "Table 8." in text and "Table 9." in text
    assert "skipped: set JAXARENA_USE_OLLAMA=1" in text
