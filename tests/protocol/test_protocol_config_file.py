"""`jaxarena-evaluate --config FILE`: a run's config.json plays the run again; flags beside it override it."""

from __future__ import annotations

import json

import pytest

from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.cli import main
from jaxarena.protocol.combinations.a import AOptions

# A alone (no LLM), 2 episodes of 2 decision periods: seconds.
CONFIG = ProtocolConfig(episodes=2, seed=7, bots=("aggressive", "balanced"), combinations=("A",), num_periods=2)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    evaluate(CONFIG, out, "first", progress=False, figures=False)
    return out / "first"


def test_a_runs_config_json_reads_back_as_its_config(first_run):
    stored = json.loads((first_run / "config.json").read_text())
    assert stored == CONFIG.as_dict()
    assert ProtocolConfig.from_file(first_run / "config.json") == CONFIG


def test_config_json_given_back_plays_the_same_episodes(first_run, tmp_path):
    argv = ["--config", str(first_run / "config.json"), "--out", str(tmp_path), "--run-id", "again"]
    assert main(argv + ["--no-progress", "--no-figures"]) == 0
    again = tmp_path / "again"
    assert (again / "episodes.csv").read_bytes() == (first_run / "episodes.csv").read_bytes()
    assert json.loads((again / "config.json").read_text()) == CONFIG.as_dict()


def test_flags_beside_a_config_file_override_only_what_they_set(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('episodes = 2\nseed = 7\nbots = ["evasive"]\ncombinations = ["A"]\nnum_periods = 1\n')
    assert main(["--config", str(path), "--seed", "9", "--out", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    stored = ProtocolConfig.from_file(tmp_path / "r" / "config.json")
    # --seed given: 9; everything else (num_periods has no flag) from the file, not the flags' defaults.
    assert stored == ProtocolConfig(episodes=2, seed=9, bots=("evasive",), combinations=("A",), num_periods=1)


def test_a_combinations_flag_overrides_its_options_in_the_file_even_at_its_default(tmp_path):
    from jaxarena.protocol.cli import _given, build_parser, config_over_file

    path = tmp_path / "a.json"
    path.write_text(json.dumps({"combinations": ["A"], "options": {"A": {"policy": "scripted:rush", "tag": 2}}}))

    def config(*flags):
        argv = ["--config", str(path), *flags]
        return config_over_file(path, build_parser().parse_args(argv), _given(build_parser(), argv))

    assert config("--seed", "1").options_of("A") == AOptions(policy="scripted:rush", tag=2)
    # --tag-a 0 is A's default, given: it sets A's options from its flags (and --policy-a's default).
    assert config("--tag-a", "0").options_of("A") == AOptions()


def test_flags_that_need_the_files_settings_are_checked_after_the_merge(tmp_path):
    from jaxarena.protocol.cli import _given, build_parser, config_over_file

    def config(path, *flags):
        argv = ["--config", str(path), *flags]
        return config_over_file(path, build_parser().parse_args(argv), _given(build_parser(), argv))

    # L alone on the command line: its adapter is in the file, not in the flags.
    with_l = tmp_path / "l.json"
    with_l.write_text(json.dumps({"combinations": ["A", "B", "L"], "options": {"L": {"adapter": "smollm2-raid-sft"}}}))
    merged = config(with_l, "--combinations", "L")
    assert merged.combinations == ("L",) and merged.options_of("L").adapter == "smollm2-raid-sft"
    # C's pricing flag beside a file that plays C.
    with_c = tmp_path / "c.json"
    with_c.write_text(json.dumps({"combinations": ["A", "B", "C"]}))
    assert config(with_c, "--price-c").options_of("C").price


@pytest.mark.parametrize(
    ("text", "suffix", "said"),
    [
        ("episodes = 2\nepisodez = 3\n", ".toml", "['episodez'] are not settings here"),
        ("episodes = [", ".toml", "not valid TOML"),
        ('{"episodes": 0}', ".json", "episodes must be >= 1"),
        ("episodes: 2", ".yaml", "a config file is .json or .toml"),
        ('episodes = "2"', ".toml", "episodes takes int, got '2'"),
    ],
)
def test_a_bad_config_file_is_refused_naming_what_is_wrong(tmp_path, capsys, text, suffix, said):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(path), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
