"""Record an episode and draw it: PNG frames and an animated GIF.

Drawing is plain PIL on host-side numpy copies of the states, so it never
touches the jitted simulation. Pillow comes with the `eval` extra and is
imported only when a frame is drawn: recording an episode, like the rest of
the arena, needs none of it. The picture shows the arena, its boxes and
spawn zones, the five NPCs and the bot with HP bars, the bot's facing and
mode, orbs in flight, the active strategy tag and the game clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from .env import Arena
from .names import BOT_TYPES, TAGS, tag_index
from .policies import Policy
from .runner import make_runner
from .tag_sources import hold_tags
from .types import EnvParams, EnvState

if TYPE_CHECKING:
    from PIL import Image

_BG, _ZONE_NPC, _ZONE_BOT = (245, 243, 236), (214, 228, 247), (247, 218, 214)
_BOX, _NPC, _BOT, _DEAD, _ORB = (120, 120, 128), (40, 90, 200), (200, 50, 40), (170, 170, 170), (240, 180, 0)


class Recording(NamedTuple):
    """A recorded episode: states[0] is the start, states[i] after tick i."""

    states: EnvState  # stacked on a leading time axis, numpy leaves
    length: int  # ticks played
    outcome: int  # 1 NPC win, 2 bot win, 3 timeout


def record_episode(
    env: Arena, params: EnvParams, policy: Policy, key: jax.Array, policy_params: Any = None, tag: int = 0
) -> Recording:
    """Play one episode to its end under `policy(policy_params, obs, key)` with `tag` held, keeping every state.

    It is the episode runner (`jaxarena.runner`) with one arena and a trace
    of every tick's state; ticks after the episode's end are dropped.
    """
    run = make_runner(env, params, policy, hold_tags, 1, trace=lambda tick: (tick.state, tick.next_state))
    result = jax.device_get(run(policy_params, params, key, tag_index(tag)))
    before, after = jax.tree.map(lambda x: np.asarray(x)[:, 0], result.trace)
    length = int(round(float(result.duration_s[0]) / float(params.dt)))
    states = jax.tree.map(lambda s0, s: np.concatenate([s0[:1], s[:length]]), before, after)
    return Recording(states, length, int(result.outcome[0]))


def _frame_state(states: EnvState, i: int) -> EnvState:
    return jax.tree.map(lambda x: x[i], states)


def draw_frame(state: EnvState, params: EnvParams, size: int = 480) -> Image.Image:
    """Draw one (unbatched, numpy) state as a square RGB image."""
    try:
        from PIL import Image, ImageDraw
    except ImportError as exc:  # the arena itself runs without pillow; only drawing needs it
        raise ImportError('drawing frames needs pillow: pip install "jaxarena[eval]" (or pillow)') from exc
    arena = float(params.arena_size)
    scale = size / arena
    margin = 28  # room for the status line at the top

    def xy(p):
        return p[0] * scale, margin + (arena - p[1]) * scale  # z points up

    def rect(box, fill):
        x0, y1 = xy(box[:2])
        x1, y0 = xy(box[2:])
        draw.rectangle([x0, y0, x1, y1], fill=fill)

    image = Image.new("RGB", (size, size + margin), _BG)
    draw = ImageDraw.Draw(image)
    rect(np.asarray(params.npc_spawn), _ZONE_NPC)
    rect(np.asarray(params.bot_spawn), _ZONE_BOT)
    for box in np.asarray(params.boxes):
        rect(box, _BOX)
    draw.rectangle([0, margin, size - 1, size + margin - 1], outline=(60, 60, 60), width=2)

    r = float(params.unit_radius) * scale * 1.3

    def unit(pos, hp_frac, colour):
        cx, cy = xy(pos)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour if hp_frac > 0 else _DEAD)
        if hp_frac > 0:
            w = 2.2 * r
            draw.rectangle([cx - w / 2, cy - r - 7, cx + w / 2, cy - r - 3], fill=(90, 0, 0))
            draw.rectangle([cx - w / 2, cy - r - 7, cx - w / 2 + w * hp_frac, cy - r - 3], fill=(40, 200, 60))

    for i in range(state.npc_pos.shape[0]):
        unit(state.npc_pos[i], float(state.npc_hp[i]) / float(params.npc_hp), _NPC)
    unit(state.bot_pos, float(state.bot_hp) / float(params.bot_hp), _BOT)
    bx, by = xy(state.bot_pos)
    fx, fy = xy(state.bot_pos + 1.5 * state.bot_facing)
    draw.line([bx, by, fx, fy], fill=(90, 0, 0), width=3)
    for pos, active in zip(state.orb_pos.reshape(-1, 2), state.orb_active.reshape(-1), strict=True):
        if active:
            ox, oy = xy(pos)
            draw.ellipse([ox - 3, oy - 3, ox + 3, oy + 3], fill=_ORB, outline=(120, 80, 0))

    bot_name = BOT_TYPES[int(params.bot_type)]
    mode = ("aggressive", "evasive")[int(state.bot_mode)]
    seconds = int(state.t) * float(params.dt)
    alive = int((state.npc_hp > 0).sum())
    status = f"t={seconds:5.1f}s  tag={TAGS[int(state.tag)]}  bot={bot_name} ({mode})  alive={alive}/5"
    draw.text((6, 8), status, fill=(20, 20, 20))
    return image


def render_frames(recording: Recording, params: EnvParams, every: int = 1, size: int = 480) -> list[Image.Image]:
    """Every `every`-th frame of a recording (the last one always included)."""
    indices = list(range(0, recording.length + 1, every))
    if indices[-1] != recording.length:
        indices.append(recording.length)
    return [draw_frame(_frame_state(recording.states, i), params, size) for i in indices]


def write_gif(frames: list[Image.Image], path: str | Path, seconds_per_frame: float = 0.1) -> Path:
    """Save frames as a looping GIF; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.gif")
    frames[0].save(tmp, save_all=True, append_images=frames[1:], duration=int(seconds_per_frame * 1000), loop=0)
    tmp.replace(path)  # never leave a half-written GIF behind
    return path


def write_png_frames(frames: list[Image.Image], folder: str | Path) -> list[Path]:
    """Save frames as frame_00000.png ... in `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, frame in enumerate(frames):
        paths.append(folder / f"frame_{i:05d}.png")
        frame.save(paths[-1])
    return paths
