"""One tick of `Arena-v0`'s rules over N arenas at once, each per-arena quantity an (N,) array.

`BatchedArena` (jaxarena/batched.py) runs these. They are `Arena.step_env`'s rules in its order
of operations, with every small axis (x/z, the five NPCs, their two orb slots, the boxes, the
evasive bot's 12 headings) unrolled in Python. Under `vmap` XLA:CPU runs each fused loop over one
arena's short axes, which do not vectorise; here every loop runs over the N arenas (docs/benchmarks.md,
"The step's roofline"). Fields of the state carry the batch as their last axis.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .bots import _FARSIGHT, _HEADINGS, _LOOKAHEAD, MODE_AGGRESSIVE, MODE_EVASIVE
from .names import (
    BOT_AGGRESSIVE,
    BOT_BALANCED,
    BOT_EVASIVE,
    MELEE,
    MOVE_TO_BOT,
    NUM_ACTIONS,
    NUM_NPCS,
    NUM_TAGS,
    RANGED,
    RETREAT,
    STRAFE_LEFT,
    STRAFE_RIGHT,
)
from .types import ORBS_PER_NPC, arena_diagonal, ticks

_EPS = 1e-6  # as physics._EPS
NPCS, SLOTS = range(NUM_NPCS), range(ORBS_PER_NPC)


def keep(*xs):
    """Each x, computed once and stored, for values that many later fusions read.

    XLA:CPU fuses an elementwise producer into every consumer, so a value that, say, every state
    field's reset select reads is recomputed by each (the whole tick, for `done`: 20x slower). A
    reduction is not fused into its consumers; one over [x, lowest] is exactly x, and unlike one
    over [x, x] the simplifier keeps it.
    """

    def one(x):
        if x.dtype == bool:
            low = False
        elif jnp.issubdtype(x.dtype, jnp.floating):
            low = -jnp.inf
        else:
            low = jnp.iinfo(x.dtype).min
        return jnp.max(jnp.stack([x, jnp.full_like(x, low)]), axis=0)

    return [one(x) for x in xs]


def norm(x, z):
    return jnp.sqrt(x * x + z * z)


def unit(x, z):
    """(x, z) / |(x, z)|, and zero where the length is zero (`physics.safe_unit`)."""
    n = norm(x, z)
    d = jnp.maximum(n, _EPS)
    return jnp.where(n > _EPS, x / d, 0.0), jnp.where(n > _EPS, z / d, 0.0)


def pick(rows, index):
    """rows[index] for a per-arena index, as a select chain."""
    out = rows[0]
    for i in range(1, len(rows)):
        out = jnp.where(index == i, rows[i], out)
    return out


def boxes(params):
    """[(x_min, z_min, x_max, z_max)] per box; each entry a scalar, or (N,) for per-arena params."""
    b = params.boxes
    return [tuple(b[k, j] for j in range(4)) for k in range(b.shape[0])]


def nearest_npc(bx, bz, nx, nz, alive):
    """(index, distance) of the nearest living NPC; index 0 and distance inf if none (argmin's rule)."""
    best, target = jnp.full_like(bx, jnp.inf), jnp.zeros(bx.shape, jnp.int32)
    for i in NPCS:
        d = jnp.where(alive[i], norm(nx[i] - bx, nz[i] - bz), jnp.inf)
        closer = d < best
        target, best = jnp.where(closer, i, target), jnp.where(closer, d, best)
    return target, best


def aggressive_move(bx, bz, nx, nz, target, dist, params):
    """`bots.aggressive_move`: close on the target, steering around boxes in the way."""
    dx, dz = unit(pick(nx, target) - bx, pick(nz, target) - bz)
    far = dist > 0.8 * params.bot_melee_range
    dx, dz = jnp.where(far, dx, 0.0), jnp.where(far, dz, 0.0)
    sx, sz = jnp.zeros_like(bx), jnp.zeros_like(bz)
    for lx, lz, hx, hz in boxes(params):
        ax, az = bx - jnp.clip(bx, lx, hx), bz - jnp.clip(bz, lz, hz)
        gap = norm(ax, az) - params.unit_radius
        weight = jnp.clip((params.bot_avoid_distance - gap) / params.bot_avoid_distance, 0.0, 1.0)
        ux, uz = unit(ax, az)
        tx, tz = -uz, ux
        side = jnp.where(tx * (bx - 0.5 * (lx + hx)) + tz * (bz - 0.5 * (lz + hz)) >= 0.0, 1.0, -1.0)
        blocking = ux * dx + uz * dz < 0.0
        sx = sx + weight * (ux + side * tx) * blocking
        sz = sz + weight * (uz + side * tz) * blocking
    n = norm(dx, dz)
    return unit(dx + sx * n, dz + sz * n)


def evasive_move(bx, bz, nx, nz, alive, params):
    """`bots.evasive_move`: the free heading whose far point is farthest from the nearest NPC."""
    r, size = params.unit_radius, params.arena_size
    ahead, far = np.float32(_LOOKAHEAD) * _HEADINGS, np.float32(_FARSIGHT) * _HEADINGS
    best, move_x, move_z = jnp.full_like(bx, -jnp.inf), jnp.zeros_like(bx), jnp.zeros_like(bz)
    any_free = jnp.zeros(bx.shape, bool)
    for h in range(len(_HEADINGS)):
        px, pz = bx + ahead[h, 0], bz + ahead[h, 1]
        fx, fz = jnp.clip(bx + far[h, 0], 0.0, size), jnp.clip(bz + far[h, 1], 0.0, size)
        clearance = jnp.full_like(bx, jnp.inf)
        for i in NPCS:
            ox, oz = fx - nx[i], fz - nz[i]
            clearance = jnp.minimum(clearance, jnp.where(alive[i], ox * ox + oz * oz, jnp.inf))
        blocked = (px < r) | (pz < r) | (px > size - r) | (pz > size - r)
        for lx, lz, hx, hz in boxes(params):
            ox, oz = px - jnp.clip(px, lx, hx), pz - jnp.clip(pz, lz, hz)
            blocked = blocked | (ox * ox + oz * oz < r * r)
        score = jnp.where(blocked, -jnp.inf, clearance)
        better = score > best  # strictly: the first maximum, as argmax
        best = jnp.where(better, score, best)
        move_x, move_z = jnp.where(better, _HEADINGS[h, 0], move_x), jnp.where(better, _HEADINGS[h, 1], move_z)
        any_free = any_free | ~blocked
    return jnp.where(any_free, move_x, 0.0), jnp.where(any_free, move_z, 0.0)


def scripted_bot(s, nx, nz, alive, params):
    """`bots.scripted_bot`: (move x, move z, attack, target, mode, phase ticks)."""
    bx, bz = s.bot_pos[0], s.bot_pos[1]
    expired = s.bot_phase_ticks <= 1
    b_mode = jnp.where(expired, 1 - s.bot_mode, s.bot_mode)
    hp = jnp.clip(s.bot_hp / params.bot_hp, 0.25, 1.0)
    scale = jnp.where(b_mode == MODE_AGGRESSIVE, hp, 2.0 - hp)
    phase = jnp.where(b_mode == MODE_AGGRESSIVE, s.bot_phase_s[0], s.bot_phase_s[1])
    b_ticks = jnp.where(expired, jnp.maximum(ticks(phase * scale, params.dt), 1), s.bot_phase_ticks - 1)
    bot_type = jnp.asarray(params.bot_type, jnp.int32)
    fixed = jnp.where(bot_type == BOT_AGGRESSIVE, MODE_AGGRESSIVE, MODE_EVASIVE)
    mode = jnp.where((bot_type == BOT_AGGRESSIVE) | (bot_type == BOT_EVASIVE), fixed, b_mode)
    phase_ticks = jnp.where(bot_type == BOT_BALANCED, b_ticks, s.bot_phase_ticks)
    target, dist = nearest_npc(bx, bz, nx, nz, alive)
    ax, az = aggressive_move(bx, bz, nx, nz, target, dist, params)
    ex, ez = evasive_move(bx, bz, nx, nz, alive, params)
    chase = mode == MODE_AGGRESSIVE
    mx, mz = jnp.where(chase, ax, ex), jnp.where(chase, az, ez)
    return mx, mz, dist <= params.bot_melee_range, target, mode, phase_ticks


def ray_box_entry(px, pz, ux, uz, length, params):
    """`physics._segment_box_entry` for one ray per arena: where it first enters a box within `length`."""
    ix = 1.0 / jnp.where(jnp.abs(ux) < _EPS, _EPS, ux)
    iz = 1.0 / jnp.where(jnp.abs(uz) < _EPS, _EPS, uz)
    best = jnp.full_like(px, jnp.inf)
    for lx, lz, hx, hz in boxes(params):
        t1x, t2x = (lx - px) * ix, (hx - px) * ix
        t1z, t2z = (lz - pz) * iz, (hz - pz) * iz
        near = jnp.maximum(jnp.minimum(t1x, t2x), jnp.minimum(t1z, t2z))
        far = jnp.minimum(jnp.maximum(t1x, t2x), jnp.maximum(t1z, t2z))
        hit = (near <= far) & (far >= 0.0) & (near <= length)
        best = jnp.minimum(best, jnp.where(hit, jnp.maximum(near, 0.0), jnp.inf))
    return best


def resolve(x, z, px, pz, params):
    """`physics.resolve_collisions` for one disc per arena, moving from (px, pz) towards (x, z)."""
    r, size = params.unit_radius, params.arena_size
    sx, sz = x - px, z - pz
    awx, awz, any_in = jnp.zeros_like(x), jnp.zeros_like(z), jnp.zeros(x.shape, bool)
    for lx, lz, hx, hz in boxes(params):
        qx, qz = x - jnp.clip(x, lx, hx), z - jnp.clip(z, lz, hz)
        ends_in = qx * qx + qz * qz < r * r
        awx = awx + jnp.where(ends_in, px - jnp.clip(px, lx, hx), 0.0)
        awz = awz + jnp.where(ends_in, pz - jnp.clip(pz, lz, hz), 0.0)
        any_in = any_in | ends_in
    dist = norm(awx, awz)
    d = jnp.maximum(dist, _EPS)
    ux, uz = awx / d, awz / d
    excess = jnp.where(any_in, jnp.minimum(sx * ux + sz * uz + (dist - r), 0.0), 0.0)
    return jnp.clip(x - excess * ux, r, size - r), jnp.clip(z - excess * uz, r, size - r)


def orb_lists(s):
    """The state's orbs as dict of field -> [npc][slot] lists of (N,) arrays."""
    return {
        "x": [[s.orb_pos[i, k, 0] for k in SLOTS] for i in NPCS],
        "z": [[s.orb_pos[i, k, 1] for k in SLOTS] for i in NPCS],
        "dx": [[s.orb_dir[i, k, 0] for k in SLOTS] for i in NPCS],
        "dz": [[s.orb_dir[i, k, 1] for k in SLOTS] for i in NPCS],
        "travel": [[s.orb_travel[i, k] for k in SLOTS] for i in NPCS],
        "block": [[s.orb_block[i, k] for k in SLOTS] for i in NPCS],
        "active": [[s.orb_active[i, k] for k in SLOTS] for i in NPCS],
    }


def launch_orbs(s, orbs, act, nx, nz, alive, params):
    """`physics.fire_orbs`: each firing NPC's orb into its first free slot, aimed at the bot. Returns fire."""
    bx, bz = s.bot_pos[0], s.bot_pos[1]
    fire = []
    for i in NPCS:
        active = orbs["active"][i]
        fire_i = (act[i] == RANGED) & (s.npc_orb_cd[i] == 0) & ~(active[0] & active[1])
        fire_i &= jnp.sqrt((bx - nx[i]) ** 2 + (bz - nz[i]) ** 2) >= params.orb_min_range
        ux, uz = unit(bx - nx[i], bz - nz[i])
        fire_i, ux, uz, block = keep(fire_i, ux, uz, ray_box_entry(nx[i], nz[i], ux, uz, params.orb_range, params))
        fire.append(fire_i)
        slots = (fire_i & ~active[0], fire_i & active[0] & ~active[1])
        for k in SLOTS:
            for field, value in (("x", nx[i]), ("z", nz[i]), ("dx", ux), ("dz", uz), ("travel", 0.0), ("block", block)):
                orbs[field][i][k] = jnp.where(slots[k], value, orbs[field][i][k])
            orbs["active"][i][k] = (active[k] & alive[i]) | slots[k]
    return fire


def fly_orbs(orbs, nbx, nbz, params):
    """`physics.advance_orbs`: every orb flies one tick towards the bot's new position. Returns hits per NPC."""
    r, size = params.unit_radius, params.arena_size
    hits = []
    for i in NPCS:
        hits_i = jnp.zeros(nbx.shape, jnp.int32)
        for k in SLOTS:
            travel, block, active = orbs["travel"][i][k], orbs["block"][i][k], orbs["active"][i][k]
            ox, oz, dx, dz = orbs["x"][i][k], orbs["z"][i][k], orbs["dx"][i][k], orbs["dz"][i][k]
            step = jnp.minimum(params.orb_speed * params.dt, params.orb_range - travel)
            fx, fz = ox - nbx, oz - nbz
            b = fx * dx + fz * dz
            c = fx * fx + fz * fz - r * r
            disc = b * b - c
            t_bot = jnp.maximum(-b - jnp.sqrt(jnp.maximum(disc, 0.0)), 0.0)
            reaches = (disc >= 0.0) & (t_bot <= step) & ((-b >= 0.0) | (c <= 0.0))
            t_box = block - travel
            hit = active & reaches & (t_bot <= t_box)
            px, pz, new_travel = ox + dx * step, oz + dz * step, travel + step
            inside = (px >= 0.0) & (px <= size) & (pz >= 0.0) & (pz <= size)
            alive = active & ~hit & (t_box > step) & inside & (new_travel < params.orb_range - 1e-4)
            orbs["active"][i][k], orbs["x"][i][k], orbs["z"][i][k], orbs["travel"][i][k] = alive, px, pz, new_travel
            hits_i = hits_i + hit.astype(jnp.int32)
        hits.append(keep(hits_i)[0])
    return hits


def move_npc(x, z, bx, bz, a, params):
    """An NPC's position after its Table 4 move (relative to the bot), pushed out of boxes and walls."""
    tx, tz = unit(bx - x, bz - z)
    lx, lz = -tz, tx
    choices = ((MOVE_TO_BOT, tx, tz), (STRAFE_LEFT, lx, lz), (STRAFE_RIGHT, -lx, -lz), (RETREAT, -tx, -tz))
    dx, dz = jnp.zeros_like(x), jnp.zeros_like(z)
    for action, cx, cz in reversed(choices):  # the first match wins, as jnp.select
        dx, dz = jnp.where(a == action, cx, dx), jnp.where(a == action, cz, dz)
    step = params.npc_speed * params.dt
    return resolve(x + dx * step, z + dz * step, x, z, params)


def valid_actions(actions, alive):
    """Each NPC's action, or -1 (no-op) for a dead NPC or an out-of-range value."""
    return [jnp.where(alive[i] & (actions[i] >= 0) & (actions[i] < NUM_ACTIONS), actions[i], -1) for i in NPCS]


def paper_shaping(tag, x, z, nbx, nbz, fx, fz, params):
    """`rewards.shaping` (Table 5) for one NPC: the active tag's term."""
    vx, vz = x - nbx, z - nbz
    d = norm(vx, vz)
    safe = jnp.maximum(d, 1e-6)
    cos = jnp.where(d > 1e-6, (vx * fx + vz * fz) / safe, 1.0)
    sin = jnp.where(d > 1e-6, (fx * vz - fz * vx) / safe, 0.0)
    d_rel = d / arena_diagonal(params)
    terms = [
        0.005 * jnp.abs(sin),
        0.01 * (1.0 - d_rel),
        jnp.where(jnp.abs(cos) < 0.5, 0.0075, 0.0),
        jnp.minimum(0.005 * d_rel, 0.005) - jnp.where(d < 8.0, 0.005, 0.0),
    ]
    return pick(terms, jnp.clip(tag, 0, NUM_TAGS - 1))


def melee_lands(s, act, alive, i, dist, params):
    return (act[i] == MELEE) & alive[i] & (s.npc_melee_cd[i] == 0) & (dist <= params.npc_melee_range)
