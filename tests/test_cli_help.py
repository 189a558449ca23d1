"""Every argument of every command says what it is for in `--help`: the console scripts, subcommands too, and the
research studies in studies/.

Each command's `main` is run with its parser's `parse_args` replaced by one that hands the parser back, so the
parser checked is the one the command builds, however it builds it, and nothing runs past it.
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

import pytest

from jaxarena.cli_errors import ArgumentParser

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

CONSOLE_SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
STUDIES = sorted(p.stem for p in (ROOT / "studies").glob("*.py"))


class _Built(BaseException):
    """Raised in place of parsing, carrying the parser; a BaseException, so `cli_main` lets it through."""


def built_parser(main, monkeypatch) -> argparse.ArgumentParser:
    """The parser `main` builds, taken at its `parse_args` call."""

    def hand_back(self, args=None, namespace=None):
        raise _Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", hand_back)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # jaxarena-train adds to it: undone after
    with pytest.raises(_Built) as built:
        main([])
    return built.value.args[0]


def undocumented(parser: argparse.ArgumentParser, command: str) -> list[str]:
    """Each argument and subcommand of `parser` (and of its subcommands) without help, as "COMMAND [SUB] FLAG".

    `help=argparse.SUPPRESS` hides an argument on purpose, so it counts as documented.
    """
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            # argparse lists a subcommand's help only where one was given; its name comes first, then aliases.
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            subparsers = {}
            for name, sub in action.choices.items():
                subparsers.setdefault(id(sub), (name, sub))
            for name, sub in subparsers.values():
                if not helps.get(name):
                    missing.append(f"{command} {name}")
                missing += undocumented(sub, f"{command} {name}")
        elif not action.help:
            missing.append(f"{command} {'/'.join(action.option_strings) or action.dest}")
    return missing


def _main(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("script", sorted(CONSOLE_SCRIPTS))
def test_every_argument_of_a_console_script_has_help(script, monkeypatch):
    parser = built_parser(_main(CONSOLE_SCRIPTS[script]), monkeypatch)
    missing = undocumented(parser, script)
    assert not missing, "add help= to these arguments:\n" + "\n".join(missing)


@pytest.mark.parametrize("study", STUDIES)
def test_every_argument_of_a_study_has_help(study, monkeypatch):
    parser = built_parser(importlib.import_module(study).main, monkeypatch)  # studies/ is on pytest's pythonpath
    missing = undocumented(parser, f"{study}.py")
    assert not missing, "add help= to these arguments:\n" + "\n".join(missing)


def test_the_check_names_a_bare_argument_and_subcommand_at_any_depth(monkeypatch):
    def main(argv):
        p = ArgumentParser(prog="prog")
        p.add_argument("--top", help="documented")
        p.add_argument("--bare")
        p.add_argument("--hidden", help=argparse.SUPPRESS)
        sub = p.add_subparsers(dest="command")
        run = sub.add_parser("run", aliases=["r"], help="documented")
        run.add_argument("path")
        sub.add_parser("quiet").add_argument("--level", help="documented")
        return p.parse_args(argv)

    parser = built_parser(main, monkeypatch)
    assert undocumented(parser, "prog") == ["prog --bare", "prog run path", "prog quiet"]
