"""A protocol run whose LLM cannot answer stops before its first cell, or, let through, says so loudly.

Real failing set-ups, no mocks: a port with nothing listening (the Ollama
server is down) and the Ollama stand-in process without the asked-for model.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from jaxarena.llm.testing import ServerProcess
from jaxarena.protocol.cli import main
from jaxarena.protocol.tables import fallback_warning


@pytest.fixture
def down_host():
    """The URL of a port with nothing listening on it: an Ollama server that is not running."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _stored_cells(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("*/cells/*.json"))


def test_an_unreachable_server_stops_the_run_before_any_cell(tmp_path, capsys, down_host):
    code = main(["--llm", "ollama", "--host", down_host, "--episodes", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"jaxarena-evaluate: error: cannot reach the Ollama server at {down_host} (connection refused). "
        "Start it with 'ollama serve', or set --host/OLLAMA_HOST, or use --llm embedded."
    ]
    assert _stored_cells(tmp_path) == []  # not even Combination A's cells were played


def test_a_model_that_is_not_pulled_stops_the_run_with_ollama_pull(tmp_path, capsys):
    with ServerProcess(responder="hash-digit", models=["mistral:latest"], ready_timeout_s=60) as server:
        argv = ["--llm", "ollama", "--host", server.url, "--model", "llama3", "--episodes", "2"]
        code = main([*argv, "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert f"model 'llama3' is not pulled on the Ollama server at {server.url}" in err
    assert "Run 'ollama pull llama3'" in err
    assert _stored_cells(tmp_path) == []


def test_a_run_of_fallbacks_warns_on_the_terminal_and_atop_the_report(tmp_path, capsys, down_host):
    # With the preflight off, the run plays on: every request is refused, every decision a fallback.
    argv = ["--llm", "ollama", "--host", down_host, "--combinations", "B", "--bots", "balanced", "--episodes", "2"]
    argv += ["--out", str(tmp_path), "--run-id", "dead", "--no-progress", "--no-figures", "--no-cache"]
    assert main([*argv, "--no-preflight"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxarena-evaluate: warning: ")
    report = (tmp_path / "dead" / "report.md").read_text().splitlines()
    assert report[0].startswith("# ") and report[1] == ""
    assert report[2].startswith("> **Warning:** ") and report[2].endswith(err[0].split("warning: ", 1)[1])
    n = sum(1 for _ in (tmp_path / "dead" / "decisions.jsonl").open())
    assert n > 0 and f"{n} of {n} LLM decisions (100%) were fallbacks (error: {n})" in report[2]
    assert "the B results do not measure the LLM" in report[2]
    # Resumed with every cell stored, the run asks the LLM nothing, so it needs no server and no preflight.
    assert main(argv) == 0
    assert capsys.readouterr().err.count("warning:") == 1


def _summary(decisions: int, fallbacks: int) -> dict:
    return {
        "tags": {"overall": {"total": decisions}},
        "fallbacks": {"overall": {"empty": 0, "non_numeric": fallbacks - 1, "error": 1, "total": fallbacks}},
    }


def test_the_warning_starts_above_half_fallbacks():
    assert fallback_warning(_summary(0, 0)) is None  # no LLM in the run
    assert fallback_warning(_summary(10, 5)) is None
    text = fallback_warning(_summary(10, 6))
    assert text.startswith("6 of 10 LLM decisions (60%) were fallbacks (non_numeric: 5, error: 1)")
