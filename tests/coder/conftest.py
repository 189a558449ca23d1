"""The coder-tuning tests' model: the tiny llama fixture, one generator per test module."""

from __future__ import annotations

import pytest
from tiny_coder import make_tiny_generator


@pytest.fixture(scope="module")
def tiny_generator():
    return make_tiny_generator()
