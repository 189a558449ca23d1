"""A layer whose packages are missing names the extra to install (the env-only install is checked in CI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jaxarena.extras import EXTRA_OF, require


def test_a_missing_package_names_the_extra_to_install():
    with pytest.raises(ImportError, match=r'pip install "jaxarena\[all\]"') as info:
        require("jaxarena.algorithms", "optax", "no_such_package_for_jaxarena")
    message = str(info.value)
    assert message.startswith("jaxarena.algorithms needs no_such_package_for_jaxarena,")  # optax is installed


def test_installed_packages_pass_and_each_package_is_in_its_extra():
    require("jaxarena.algorithms", "optax", "distrax", "orbax")
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    distribution = {"orbax": "orbax-checkpoint"}  # import name -> the name pip installs
    for module, extra in EXTRA_OF.items():
        names = [re.match(r"[A-Za-z0-9._-]+", req).group(0) for req in extras[extra]]
        assert distribution.get(module, module) in names, f"{module} is not in the [{extra}] extra"
