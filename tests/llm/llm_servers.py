"""Fixtures for the LLM-layer tests: a real test-server process per test module.

Imported by the test modules that use them (not a conftest: `tests/conftest.py`
is imported by name from the arena tests, and a second conftest here would
shadow it).
"""

from __future__ import annotations

import socket

import pytest

from jaxarena.llm.testing import ServerProcess


@pytest.fixture(scope="module")
def digit_server():
    """A fast, deterministic server (hash-digit responder) that answers to "mistral".

    Tests change its faults with `set_faults` and zero its counters with `reset`;
    the `clean_server` fixture restores a fault-free state around each test.
    """
    with ServerProcess(responder="hash-digit", models=["mistral:latest"], ready_timeout_s=60) as server:
        yield server


@pytest.fixture
def server(digit_server):
    digit_server.set_faults(
        delay_s=0.0,
        slots=4,
        p_timeout=0.0,
        p_http_500=0.0,
        p_drop=0.0,
        p_garbage=0.0,
        p_empty=0.0,
        p_out_of_range=0.0,
        hang_s=60.0,
        seed=0,
    )
    digit_server.reset()
    return digit_server


@pytest.fixture
def free_port():
    """A port with nothing listening on it (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
