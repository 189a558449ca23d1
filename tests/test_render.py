"""Recording an episode and drawing it as PNG frames and a GIF."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

import jaxarena
from jaxarena.policies import focus_fire_policy, random_policy
from jaxarena.render import record_episode, render_frames, write_gif, write_png_frames

ROOT = Path(__file__).resolve().parents[1]


def test_record_episode_stops_at_the_end_and_keeps_the_outcome():
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=4.0)
    rec = record_episode(env, params, random_policy, jax.random.key(0))
    assert rec.length == 40 and rec.outcome == 3  # nobody catches the evasive bot in 4 s
    assert rec.states.t.shape == (41,) and int(rec.states.t[-1]) == 40


def test_record_episode_ends_on_the_killing_blow():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    rec = record_episode(env, params, focus_fire_policy, jax.random.key(2), tag=1)
    assert rec.outcome == 1 and rec.length < 1200
    assert rec.states.t.shape == (rec.length + 1,) and int(rec.states.t[-1]) == rec.length
    assert float(rec.states.bot_hp[-1]) <= 0.0 < float(rec.states.bot_hp[-2])  # the last frame is the kill
    assert np.all(rec.states.tag == 1)
    with pytest.raises(ValueError, match="tag"):
        record_episode(env, params, focus_fire_policy, jax.random.key(2), tag=7)


def test_recording_needs_no_pillow_and_drawing_says_how_to_get_it(monkeypatch):
    # A None entry in sys.modules makes `import PIL` fail, as in an install without the eval extra.
    monkeypatch.setitem(sys.modules, "PIL", None)
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=1.0)
    rec = record_episode(env, params, random_policy, jax.random.key(0))
    assert rec.length == 10
    with pytest.raises(ImportError, match=r"jaxarena\[eval\]"):
        render_frames(rec, params)


def test_frames_show_units_where_they_stand(tmp_path):
    env, params = jaxarena.make("Arena-v0", bot="aggressive", episode_s=3.0)
    rec = record_episode(env, params, random_policy, jax.random.key(1))
    frames = render_frames(rec, params, every=5)
    assert len(frames) == len(range(0, rec.length + 1, 5)) + (rec.length % 5 != 0)
    image = np.asarray(frames[0])
    state0 = jax.tree.map(lambda x: x[0], rec.states)
    scale = 480 / 30.0

    def patch(pos):  # pixels within 5 px of a unit's centre
        x, z = np.asarray(pos)
        row, col = 28 + int((30 - z) * scale), int(x * scale)
        return image[row - 5 : row + 6, col - 5 : col + 6].reshape(-1, 3).astype(int)

    bot = patch(state0.bot_pos)
    assert np.any((bot[:, 0] > 150) & (bot[:, 1] < 100))  # the bot is drawn in red where it stands
    npc = patch(state0.npc_pos[0])
    assert np.any((npc[:, 2] > 150) & (npc[:, 0] < 100))  # an NPC in blue
    gif = write_gif(frames, tmp_path / "ep.gif")
    assert Image.open(gif).n_frames == len(frames)
    pngs = write_png_frames(frames[:2], tmp_path / "frames")
    assert [p.name for p in pngs] == ["frame_00000.png", "frame_00001.png"]


@pytest.mark.slow  # over ~5 s on 2 cores: `-m core` stays under two minutes
def test_render_script_writes_a_gif(tmp_path):
    out = tmp_path / "one.gif"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "render.py"),
            "--bot",
            "aggressive",
            "--tag",
            "2",
            "--every",
            "10",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert out.exists() and Image.open(out).n_frames > 1
    assert "GIF" in result.stdout


@pytest.mark.skipif(not (ROOT / "algorithms" / "pretrained" / "A" / "config.json").exists(), reason="no packaged A")
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_render_script_plays_a_trained_policy(tmp_path):
    out = tmp_path / "a.gif"
    cmd = [sys.executable, str(ROOT / "scripts" / "render.py"), "--policy", "A", "--bot", "aggressive"]
    result = subprocess.run([*cmd, "--every", "10", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert any(o in result.stdout for o in ("npc_win", "bot_win", "timeout")) and Image.open(out).n_frames > 1
    bad = subprocess.run([*cmd, "--policy", "no/such/run"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no/such/run" in bad.stderr
