"""The planner -> coder -> critic loop against the Ollama-API test server (a pipeline test only).

The server's "coder-fixture" responder answers by role: a fixed plan, coder
replies cycling by candidate number through a good program, one the sandbox
refuses and a reply without code, and a critic that says [Change Tactic] in
odd rounds. Its scores are a check of the plumbing, never a result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxarena.coder.cli import main as cli_main
from jaxarena.coder.language import reference_text
from jaxarena.coder.loop import Loop, update_skills
from jaxarena.coder.loop_config import LoopConfig, LoopError, run_name
from jaxarena.coder.prompts import (
    CHANGE,
    IMPROVE,
    coder_prompt,
    parse_decision,
    parse_skills,
    planner_prompt,
    task_information,
)
from jaxarena.coder.run_log import load_events
from jaxarena.coder.score_types import Score
from jaxarena.llm.testing import ServerProcess

MODEL = "qwen2.5-coder:7b"


@pytest.fixture(scope="module")
def server():
    with ServerProcess(responder="coder-fixture", models=[MODEL], ready_timeout_s=60) as s:
        yield s


def config_for(server, **kw) -> LoopConfig:
    base = dict(
        llm="ollama",
        model=MODEL,
        host=server.url,
        k=3,
        rounds=3,
        episodes_per_bot=4,
        bots=("aggressive", "balanced"),
        lanes=8,
        seed=1,
    )
    return LoopConfig(**{**base, **kw})


def requests(server) -> int:
    return server.stats()["by_endpoint"]["chat"]


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_the_whole_loop(server, tmp_path):
    server.reset()
    lines = []
    best = Loop(config_for(server), tmp_path / "run", progress=lines.append).run()
    events = load_events(tmp_path / "run")
    kinds = [(e["event"], e["round"]) for e in events]
    # Round 1 plans; its critic says change, so round 2 plans again; round 2's says improve: round 3 fixes.
    assert [r for kind, r in kinds if kind == "plan"] == [1, 2]
    assert [e["decision"] for e in events if e["event"] == "critic"] == [CHANGE, IMPROVE, CHANGE]
    assert requests(server) == 2 + 3 * 3 + 3  # plans, candidates, critics
    scored = [e for e in events if e["event"] == "scored"]
    for e in scored:
        rewards = [s["reward"] for s in e["scores"]]
        assert [s["status"] for s in e["scores"]] == ["ok", "error", "no_code"]
        assert rewards[1:] == [-0.5, -1.0] and 0.0 <= rewards[0] <= 1.0
        assert "while" in e["scores"][1]["error"] and e["scores"][1]["error_line"] == 2
    # Seed 002's eq. 4: every skill of the plan averages each candidate's win rate (0 for a failure).
    good = scored[0]["scores"][0]["reward"]
    skills = scored[-1]["skills"]
    assert set(skills) == {"focus fire", "hit and run"}
    assert skills["focus fire"]["n"] == 9
    assert skills["focus fire"]["r"] == pytest.approx(good / 3)
    # The fixing round's coder saw the critic's suggestion and the program it reviewed.
    fix_prompt = next(e for e in events if e["event"] == "code" and e["round"] == 3)["prompt"]["user"]
    assert "never kites" in fix_prompt and "obs.bot.can_attack" in fix_prompt
    coder_system = next(e for e in events if e["event"] == "code")["prompt"]["system"]
    assert reference_text() in coder_system
    critic_user = next(e for e in events if e["event"] == "critic")["prompt"]["user"]
    assert "  3 |     if obs.bot.can_attack:" in critic_user  # numbered, as errors cite lines
    # The record on disk.
    run = tmp_path / "run"
    report = (run / "report.md").read_text()
    assert best["round"] == 1 and best["candidate"] == 1 and best["score"].reward == good
    assert "return MOVE_TO_BOT" in report and "| aggressive |" in report and "best.gif" in report
    with Image.open(run / "best.gif") as gif:
        assert gif.format == "GIF" and gif.n_frames > 1
    for name in ("plan.md", "candidate_1.md", "candidate_1.py", "candidate_3.md", "critic.md", "scores.json"):
        assert (run / "round_01" / name).exists(), name
    assert not (run / "round_01" / "candidate_3.py").exists()  # no code in that reply
    assert not (run / "round_03" / "plan.md").exists()
    assert sum(" candidate " in line and "reward" in line for line in lines) == 9
    assert sum("done: best reward" in line for line in lines) == 3


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_a_finished_run_is_not_redone_and_can_be_extended(server, tmp_path):
    config = config_for(server, rounds=1)
    Loop(config, tmp_path / "run", progress=None).run()
    before = (tmp_path / "run" / "events.jsonl").read_text()
    server.reset()
    Loop(config, tmp_path / "run", progress=None).run()
    assert requests(server) == 0 and (tmp_path / "run" / "events.jsonl").read_text() == before
    Loop(config_for(server, rounds=2), tmp_path / "run", progress=None).run()
    assert requests(server) == 1 + 3 + 1  # round 2 only: a plan (round 1 said change), K candidates, a critic
    after = (tmp_path / "run" / "events.jsonl").read_text()
    assert after.startswith(before) and {e["round"] for e in load_events(tmp_path / "run")} == {1, 2}


@pytest.mark.slow  # a loop with real scoring: over ~10 s on 2 cores
def test_a_raced_loop_scores_with_the_best_so_far_as_incumbent(server, tmp_path):
    """--race: the fixture's one good program races alone, so it gets the full budget and full scoring's score."""
    plain = Loop(config_for(server, rounds=1), tmp_path / "plain", progress=None).run()
    raced_config = config_for(server, rounds=2, race=True, race_first=2)
    loop = Loop(raced_config, tmp_path / "raced", progress=None)
    best = loop.run()
    assert json.loads((tmp_path / "raced" / "config.json").read_text())["race"] is True
    assert best["score"] == plain["score"] and best["score"].episodes_per_bot == 4
    assert loop._best_before(2) == best["score"] and loop._best_before(1) is None


def _wait_for(path, predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and predicate(path.read_text()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{path} never satisfied the condition")


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_resume_after_a_kill_redoes_nothing_and_loses_nothing(server, tmp_path):
    """Kill the CLI mid-run (and cut its last line), resume: only the missing steps are asked for again."""
    out = tmp_path / "runs"
    args = ["--llm", "ollama", "--model", MODEL, "--host", server.url, "--k", "3", "--rounds", "3", "--seed", "1"]
    args += ["--episodes-per-bot", "4", "--bots", "aggressive", "balanced", "--lanes", "8"]
    args += ["--out", str(out), "--run", "r", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "jaxarena.coder.cli", *args], env=dict(os.environ))
    events_path = out / "r" / "events.jsonl"
    try:
        _wait_for(events_path, lambda text: '"event": "scored"' in text, timeout_s=300)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # As if the kill had come in the middle of writing a line.
    with open(events_path, "a") as f:
        f.write('{"event": "critic", "round": 9, "rep')
    kept = load_events(out / "r")
    assert events_path.read_text().endswith("\n")  # the cut line was dropped
    done = {(e["event"], e["round"], e.get("candidate")) for e in kept}
    asked_before = sum(1 for e in kept if e["event"] in ("plan", "code", "critic"))

    server.reset()
    config = config_for(server)
    Loop(config, out / "r", progress=None).run()
    events = load_events(out / "r")
    keys = [(e["event"], e["round"], e.get("candidate")) for e in events]
    assert len(keys) == len(set(keys)), "a step was recorded twice"
    assert events[: len(kept)] == kept, "recorded steps changed"
    assert done <= set(keys)
    total_asks = 2 + 3 * 3 + 3
    assert requests(server) == total_asks - asked_before
    assert len([k for k in keys if k[0] == "scored"]) == 3 and (out / "r" / "report.md").exists()


def test_skill_running_mean_is_eq_4():
    scores = [Score(0.5, "ok"), Score(-0.5, "error"), Score(-1.0, "no_code"), Score(0.8, "ok")]
    skills = update_skills({"kite": {"r": 0.2, "n": 2}}, ["kite", "focus fire"], scores)
    assert skills["kite"]["n"] == 6 and skills["kite"]["r"] == pytest.approx((0.2 * 2 + 0.5 + 0 + 0 + 0.8) / 6)
    assert skills["focus fire"] == {"r": pytest.approx(1.3 / 4), "n": 4}
    r, n = 0.0, 0
    for g in np.linspace(0, 1, 7):
        r, n = (r * n + g) / (n + 1), n + 1
    assert update_skills({}, ["x"], [Score(float(g), "ok") for g in np.linspace(0, 1, 7)])["x"]["r"] == pytest.approx(r)


def test_prompts_carry_the_scenarios_numbers_and_the_history():
    import jaxarena

    _, params = jaxarena.make("Arena-v0", scenario="headroom")
    task = task_information(params, "headroom", 1000)
    assert "The bot: 1500 HP, speed 4 u/s" in task and "(13, 13)-(17, 17)" in task
    skills = {"kite": {"r": 0.25, "n": 4}, "focus fire": {"r": 0.6, "n": 8}}
    prompt = planner_prompt(task, skills, [(["kite"], 0.3)], Score(-0.5, "error", error="line 3: type: oops"))
    assert prompt.system.startswith("Role: planner.") and task in prompt.system
    assert prompt.user.index("focus fire: score r = 0.600 over 8") < prompt.user.index("kite: score r = 0.250")
    assert "line 3: type: oops" in prompt.user and "- kite: 0.300" in prompt.user
    coder = coder_prompt("REF", task, "### Tactic 1: Kite", 2, 4)
    assert coder.system.startswith("Role: coder.") and "REF" in coder.system
    assert "candidate 2 of 4" in coder.user and "Kite" in coder.user


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("... [Change Tactic]", (CHANGE, True)),
        ("[Change Tactic] at first, but finally: [Improve Tactic]", (IMPROVE, True)),
        ("no marker", (IMPROVE, False)),
    ],
)
def test_critic_decision(reply, expected):
    assert parse_decision(reply) == expected


def test_skill_names_from_the_plan():
    plan = "### Tactic 1: **Focus Fire**\n*Condition*\n### Tactic 2 - Kite\n### Tactic 3: focus fire\n## tactic 4: x"
    assert parse_skills(plan) == ["focus fire", "kite", "x"]
    assert parse_skills("just prose") == ["unnamed tactic"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"k": 0}, "k must be a positive integer"),
        ({"rounds": -1}, "rounds must be a positive integer"),
        ({"episodes_per_bot": 0}, "episodes_per_bot"),
        ({"llm": "gpt5"}, "unknown LLM"),
        ({"llm": "embedded", "model": "qwen"}, "takes none"),
        ({"scenario": "moon"}, "presets"),
        ({"bots": ("dragon",)}, "unknown bot"),
        ({"temperature": 5.0}, "temperature"),
        ({"llm": "ollama", "coder_adapter": "x"}, "coder-adapter runs in our own forward pass"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(LoopError, match=message):
        LoopConfig(**kwargs)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_a_run_folder_with_another_config_is_refused(server, tmp_path):
    Loop(config_for(server, rounds=1), tmp_path / "run", progress=None).run()
    with pytest.raises(LoopError, match=r"different config \(k: 3 there, 2 now"):
        Loop(config_for(server, rounds=1, k=2), tmp_path / "run", progress=None)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(LoopError, match="not a coder run"):
        Loop(config_for(server), tmp_path / "other", progress=None)


def test_the_ollama_backend_generates_programs_not_tags():
    from jaxarena.coder.loop_backend import make_loop_backend

    backend = make_loop_backend(LoopConfig(llm="ollama", max_tokens=640, temperature=0.3, seed=4))
    assert backend.model == "qwen2.5-coder:7b" and backend.decode == "free"
    assert backend.options == {"num_predict": 640, "temperature": 0.3, "top_p": 0.95, "seed": 4, "num_ctx": 8192}


def test_cli_errors_are_clear(tmp_path, capsys, free_port):
    assert cli_main(["--llm", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown LLM 'nope'" in capsys.readouterr().err
    assert cli_main(["--k", "0", "--out", str(tmp_path)]) == 2
    assert "k must be a positive integer" in capsys.readouterr().err
    # No server there: the run stops before any step, with the fix in the message.
    argv = ["--llm", "ollama", "--host", f"http://127.0.0.1:{free_port}", "--out", str(tmp_path), "--run", "x"]
    assert cli_main([*argv, "--k", "1", "--rounds", "1"]) == 2
    assert "cannot reach the Ollama server" in capsys.readouterr().err
    assert not (tmp_path / "x" / "events.jsonl").exists()
    assert json.loads((tmp_path / "x" / "config.json").read_text())["k"] == 1


def test_cli_in_a_running_jax_process_leaves_xla_flags_alone(tmp_path, free_port, monkeypatch):
    # Set after JAX started, the flag would miss this process and leak into its children, whose
    # numerics then differ from this process's (it broke the real-model server tests).
    monkeypatch.setenv("XLA_FLAGS", "")
    argv = ["--llm", "ollama", "--host", f"http://127.0.0.1:{free_port}", "--out", str(tmp_path), "--run", "y"]
    assert cli_main([*argv, "--k", "1", "--rounds", "1"]) == 2
    assert os.environ["XLA_FLAGS"] == ""


@pytest.fixture
def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shifted_adapter(gguf, out):
    """An after-prefix adapter with every entry moved off zero (so it changes replies) for the model `gguf`."""
    import jax

    from jaxarena.llm import lora as L
    from jaxarena.llm.weights import load_model

    loaded = load_model(gguf)
    lora = L.LoraConfig(rank=4, targets=("q", "v"))
    leaves, tree = jax.tree.flatten(L.init_adapter(loaded.config, lora, jax.random.key(0)))
    adapter = jax.tree.unflatten(tree, [x + 0.05 for x in leaves])
    card = {"acts_on": L.AFTER_PREFIX, "kind": "coder-adapter"}
    return L.save_adapter(out, adapter, lora, base_sha256=loaded.sha256, card=card)


def test_a_coder_adapter_gets_its_own_backend(tmp_path):
    from jaxarena.llm import lora as L

    fixture = Path(__file__).resolve().parents[2] / "llm" / "fixtures" / "tiny_llama.gguf"
    path = _shifted_adapter(fixture, tmp_path / "adapter")
    config = LoopConfig(llm=f"gguf:{fixture}", k=1, rounds=1, coder_adapter=str(path))
    loop = Loop(config, tmp_path / "run", progress=None)
    assert loop.coder_backend is not loop.backend
    assert loop.coder_backend.load().adapter.checksum == json.loads((path / "card.json").read_text())["checksum"]
    assert loop.backend.load().adapter is None
    assert LoopConfig.from_json(config.to_json()) == config
    checksum = json.loads((path / "card.json").read_text())["checksum"]
    assert run_name(config).endswith("-coder-" + checksum[:12])
    with pytest.raises(L.AdapterError, match="not found"):
        run_name(LoopConfig(llm=f"gguf:{fixture}", coder_adapter=str(tmp_path / "missing")))


@pytest.mark.long  # two one-round runs of the embedded model (~2 min on 2 cores)
def test_a_coder_adapter_answers_the_coders_prompts_only(tmp_path):
    """With --coder-adapter the coder's replies come from the adapted model; the planner's stay the base's."""
    from jaxarena.llm.weights import find_gguf

    path = _shifted_adapter(find_gguf(), tmp_path / "adapter")
    common = dict(llm="embedded", k=1, rounds=1, episodes_per_bot=2, lanes=8, max_tokens=8)
    runs = {}
    for name, extra in (("base", {}), ("tuned", {"coder_adapter": str(path)})):
        Loop(LoopConfig(**common, **extra), tmp_path / name, progress=None).run()
        runs[name] = {e["event"]: e for e in load_events(tmp_path / name)}
    assert runs["tuned"]["plan"]["reply"] == runs["base"]["plan"]["reply"]
    assert runs["tuned"]["code"]["reply"] != runs["base"]["code"]["reply"]
