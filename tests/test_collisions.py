"""Sliding on boxes: no move is lengthened, no disc enters a box (docs/arena.md, step 3).

Pushing a disc's end point out of a box, the old rule, lengthened moves that
cut a box's corner (NPCs up to +11%, the bot up to +28% over its Table 1
speed). These checks run over many random moves near every box, with
hypothesis and with large seeded batches, and through the arena's step for
the cases a player meets: sliding along a face, rounding a corner.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from conftest import SPREAD, actions, build_state
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxarena
from jaxarena import physics
from jaxarena.names import MELEE, MOVE_TO_BOT, STRAFE_LEFT, STRAFE_RIGHT

_, PARAMS = jaxarena.make("Arena-v0")
BOXES = np.asarray(PARAMS.boxes)
R = float(PARAMS.unit_radius)
RESOLVE = jax.jit(lambda pos, prev: physics.resolve_collisions(pos, prev, R, PARAMS.boxes, PARAMS.arena_size))


def gap_to_boxes(pos: np.ndarray) -> np.ndarray:
    """Distance from each centre to the nearest box."""
    closest = np.clip(pos[:, None, :], BOXES[:, :2], BOXES[:, 2:])
    return np.linalg.norm(pos[:, None, :] - closest, axis=-1).min(axis=-1)


def random_moves(seed: int, n: int, max_step: float):
    """Free start positions within a step of some box (faces and corners alike), random steps."""
    rng = np.random.default_rng(seed)
    box = BOXES[rng.integers(0, len(BOXES), n)]
    # Uniform over the box grown by r + a step: most starts touch or nearly touch it.
    margin = R + max_step
    prev = rng.uniform(box[:, :2] - margin, box[:, 2:] + margin).astype(np.float32)
    prev = prev[gap_to_boxes(prev) >= R]
    angle = rng.uniform(0.0, 2.0 * np.pi, len(prev))
    length = rng.uniform(0.0, max_step, len(prev))
    # A quarter of the steps at the full length: the fastest unit is where the bug was largest.
    length[: len(prev) // 4] = max_step
    step = (length[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=-1)).astype(np.float32)
    return prev, step


def check_moves(prev: np.ndarray, step: np.ndarray):
    new = np.asarray(RESOLVE(jnp.asarray(prev + step), jnp.asarray(prev)))
    moved = np.linalg.norm(new - prev, axis=-1)
    asked = np.linalg.norm(step, axis=-1)
    assert np.all(moved <= asked + 1e-5), f"a move grew from {asked[np.argmax(moved - asked)]} to {moved.max()}"
    assert np.all(gap_to_boxes(new) >= R - 1e-4)
    assert np.all((new >= R - 1e-6) & (new <= float(PARAMS.arena_size) - R + 1e-6))
    return new, moved, asked


def test_seeded_batches_of_moves_near_boxes_never_grow_or_enter():
    for seed, max_step in [(0, 0.4), (1, 0.5), (2, 0.25)]:  # NPC, bot, a slower unit
        prev, step = random_moves(seed, 200_000, max_step)
        _, moved, asked = check_moves(prev, step)
        # Many moves really were blocked (the batch exercised contacts), and free ones were kept whole.
        blocked = moved < asked - 1e-4
        assert 0.01 < blocked.mean() < 0.9
        free = gap_to_boxes(prev + step) >= R + 1e-3
        np.testing.assert_allclose(moved[free], asked[free], atol=1e-5)


@settings(max_examples=300, deadline=None)
@given(
    box=st.integers(0, len(BOXES) - 1),
    corner=st.sampled_from([(0, 1), (2, 1), (0, 3), (2, 3)]),
    start_angle=st.floats(0.0, 2.0 * np.pi),
    start_gap=st.floats(0.0, 0.6),
    heading=st.floats(0.0, 2.0 * np.pi),
    length=st.floats(0.0, 0.5),
)
def test_moves_around_any_corner_never_grow_or_enter(box, corner, start_angle, start_gap, heading, length):
    """Starts on a circle round a box corner (touching to 0.6 u off), any heading and step length."""
    c = BOXES[box, list(corner)]
    prev = c + (R + start_gap) * np.array([np.cos(start_angle), np.sin(start_angle)])
    prev = prev[None].astype(np.float32)
    if gap_to_boxes(prev)[0] < R:  # the start circle dips into the box's faces
        return
    step = (length * np.array([[np.cos(heading), np.sin(heading)]])).astype(np.float32)
    check_moves(prev, step)


def test_the_measured_corner_case_keeps_its_length():
    """The worst NPC move found against the old rule: 0.4 u asked, 0.446 u made."""
    prev = np.array([[17.107119, 17.489164]], np.float32)
    step = np.array([[0.14809392, -0.37157527]], np.float32)
    new, moved, _ = check_moves(prev, step)
    # Mostly blocked (0.33 u of it points into the corner), it slides on east by the rest.
    np.testing.assert_allclose(moved[0], np.sqrt(0.4**2 - 0.332**2), atol=0.01)
    assert new[0, 0] > prev[0, 0] + 0.2


_STEP = jax.jit(jaxarena.Arena().step_env)


def play(params, state, action_rows):
    positions = [np.asarray(jnp.concatenate([state.npc_pos, state.bot_pos[None]]))]
    for row in action_rows:
        state = _STEP(jax.random.key(0), state, jnp.asarray(row, jnp.int32), params)[0]
        positions.append(np.asarray(jnp.concatenate([state.npc_pos, state.bot_pos[None]])))
    return state, np.stack(positions)


def test_an_npc_sliding_along_a_face_and_round_a_corner_keeps_its_speed(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [14.0, 12.5]  # touching the central box's south face, west of its middle
    # The bot stands south-east of the box, so "move to bot" presses the NPC
    # diagonally into the face: it must slide east along it, then round the corner.
    state = build_state(params, npc, [20.0, 11.0])
    state, path = play(params, state, [actions(MELEE, MELEE, MOVE_TO_BOT, MELEE, MELEE)] * 30)
    per_tick = np.linalg.norm(np.diff(path[:, 2], axis=0), axis=-1)
    chex.assert_trees_all_close(per_tick.max() <= 0.4 + 1e-5, True)
    assert path[-1, 2, 0] > 17.0  # it got round the corner
    assert gap_to_boxes(path[:, 2]).min() >= R - 1e-4


def test_the_bot_rounding_a_box_never_exceeds_its_speed():
    # The aggressive bot north of the central box chases an NPC due south of it.
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_melee_damage=0.0)
    npc = SPREAD.copy()
    npc[:, 1] = 2.0
    npc[2] = [15.2, 8.0]
    state = build_state(params, npc, [15.0, 17.6])
    hold = actions(MELEE, MELEE, MELEE, MELEE, MELEE)
    state, path = play(params, state, [hold] * 40)
    per_tick = np.linalg.norm(np.diff(path[:, 5], axis=0), axis=-1)
    assert per_tick.max() <= 0.5 + 1e-5
    assert path[-1, 5, 1] < 13.0  # it got round the box towards its target
    assert gap_to_boxes(path[:, 5]).min() >= R - 1e-4


def test_strafing_along_a_face_moves_at_full_speed(still_bot):
    """A tangential move is not slowed: sliding costs only the blocked component."""
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [12.5, 15.0]  # touching the central box's west face
    state = build_state(params, npc, [10.0, 15.0])  # the bot due west: strafing runs along the face
    for action in (STRAFE_LEFT, STRAFE_RIGHT):
        _, path = play(params, state, [actions(MELEE, MELEE, action, MELEE, MELEE)])
        np.testing.assert_allclose(np.linalg.norm(path[1, 2] - path[0, 2]), 0.4, atol=1e-5)
        assert abs(path[1, 2, 0] - 12.5) < 1e-5  # along the face, still touching it
