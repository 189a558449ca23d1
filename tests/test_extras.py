"""A layer whose packages are missing names the extra to install (the env-only install is checked in CI)."""

from __future__ import annotations

import pytest

from jaxarena.extras import EXTRA_OF, require


def test_a_missing_package_names_the_extra_to_install():
    with pytest.raises(ImportError, match=r'pip install "jaxarena\[all\]"') as info:
        require("jaxarena.algorithms", "optax", "no_such_package_for_jaxarena")
    message = str(info.value)
    assert message.startswith("jaxarena.algorithms needs no_such_package_for_jaxarena,")  # optax is installed


def test_installed_packages_pass_and_every_extra_is_declared():
    require("jaxarena.algorithms", "optax", "distrax", "orbax")
    assert set(EXTRA_OF.values()) <= {"train", "eval", "llm"}
