"""Config files: a run's settings as a JSON or TOML file, read back as the fields of a config dataclass.

A run writes its config as JSON (`config.json`); a user may write TOML by hand. Either is read by
`read_fields(path, fields)`, which refuses a key that is no field (a typo would otherwise be ignored
and the run would train with the default), so `jaxarena-train --config RUN/config.json` starts a
run with exactly the settings of RUN.

    # sweep.toml
    combination = "A"
    bots = ["evasive"]
    total_timesteps = 4_000_000
    [arena]
    bot_hp = 600
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: The file types read, by suffix.
SUFFIXES = (".json", ".toml")


def read_fields(path: str | Path, fields: Iterable[str]) -> dict[str, Any]:
    """The settings in a `.json` or `.toml` file as a dict; ValueError for a file that is not one, or
    that holds a key not in `fields`. FileNotFoundError names a missing file."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: a config file is .json or .toml, got {path.suffix or 'no suffix'!r}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such config file")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file holds a table of settings, got {type(data).__name__}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{path}: {unknown} are not settings here; the settings are {', '.join(sorted(fields))}")
    return data


def config_from(cls, source, **changes):
    """A `cls` dataclass from the attributes of `source` named as its fields (parsed arguments, or
    another config), with `changes` in their place. A list read for a tuple field becomes a tuple; a
    field `source` lacks keeps its default. The one way a command turns its flags into its config."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in changes:
            values[field.name] = changes[field.name]
        elif hasattr(source, field.name):
            value = getattr(source, field.name)
            values[field.name] = tuple(value) if isinstance(value, list) and "tuple" in str(field.type) else value
    unknown = sorted(set(changes) - set(values))
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {unknown}")
    return cls(**values)


#: The plain field types a file's value is checked against before the config sees it.
_PLAIN_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def load_config(cls, path: str | Path):
    """A `cls` dataclass from a .json or .toml file of its fields (`read_fields`); a list is read back as a
    tuple where the field is one, so a config written as JSON loads equal to itself. A value of the wrong
    plain type (`episodes = "2"`) is a ValueError naming the field."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    values = read_fields(path, fields)
    for name, value in values.items():
        kind = fields[name].removesuffix(" | None")
        wants = _PLAIN_TYPES.get(kind)
        if wants is None or (value is None and fields[name].endswith("| None")):
            continue
        if not isinstance(value, wants) or (isinstance(value, bool) and kind != "bool"):
            raise ValueError(f"{path}: {name} takes {kind}, got {value!r}")
    return config_from(cls, SimpleNamespace(**values))
