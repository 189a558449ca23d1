"""Movement, collisions with walls and boxes, and orb flight.

All functions are pure, branch-free and work on any leading batch shape, so
the arena's step stays a short chain of fused elementwise XLA ops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Direction components smaller than this count as zero in the orb slab test;
# 1/_EPS stays finite, so 0 * (1/_EPS) is 0 rather than NaN.
_EPS = 1e-6


def norm(v: jax.Array) -> jax.Array:
    """Euclidean length over the last axis (which holds (x, z))."""
    return jnp.sqrt(jnp.sum(v * v, axis=-1))


def safe_unit(v: jax.Array) -> jax.Array:
    """v / |v|, and the zero vector where |v| is zero."""
    n = norm(v)[..., None]
    return jnp.where(n > _EPS, v / jnp.maximum(n, _EPS), 0.0)


def rotate_left(v: jax.Array) -> jax.Array:
    """Rotate by +90 degrees seen from above, with x to the right and z up."""
    return jnp.stack([-v[..., 1], v[..., 0]], axis=-1)


def closest_box_points(pos: jax.Array, boxes: jax.Array) -> jax.Array:
    """Closest point of each box to each position: (..., 2), (K, 4) -> (..., K, 2)."""
    return jnp.clip(pos[..., None, :], boxes[:, :2], boxes[:, 2:])


def nearest_box_point(pos: jax.Array, boxes: jax.Array) -> jax.Array:
    """The closest point on any box, i.e. the nearest cover: (..., 2) -> (..., 2)."""
    # A running minimum over the (few, static) boxes: elementwise selects
    # fuse into one loop, where argmin + gather would not.
    best, best_d2 = pos, jnp.full(pos.shape[:-1], jnp.inf, pos.dtype)
    for k in range(boxes.shape[0]):
        point = jnp.clip(pos, boxes[k, :2], boxes[k, 2:])
        d2 = jnp.sum((point - pos) ** 2, axis=-1)
        closer = d2 < best_d2
        best = jnp.where(closer[..., None], point, best)
        best_d2 = jnp.where(closer, d2, best_d2)
    return best


def resolve_collisions(pos: jax.Array, previous: jax.Array, radius, boxes: jax.Array, arena_size) -> jax.Array:
    """Move discs of `radius` from `previous` towards `pos`, sliding on boxes, inside the walls.

    A step that ends clear of every box is taken whole. One that would end
    overlapping a box loses the part of it that goes towards the box beyond
    the free gap, along the box's outward normal at the point nearest
    `previous`: a disc pressing on a face slides along it, one meeting a
    corner slides along the corner's tangent. The disc then ends in the box's
    supporting half-plane at that point, hence clear of the (convex, rounded)
    box, and since only part of one component is removed no disc moves
    farther than `pos` asked. (Pushing the end point out of the box instead,
    the rule before, lengthens moves that cut a corner by up to a quarter.)
    Corrections for all boxes are summed: `make` keeps boxes more than two
    discs' reach apart, so at most one box is within a tick's reach. Walls
    clip last; every box lies more than a diameter from them, so the clip
    cannot push a disc into one. A disc that already overlaps a box (only a
    hand-built state can) is pushed out.
    """
    step = pos - previous
    p, q = previous[..., None, :], pos[..., None, :]
    lo, hi = boxes[:, :2], boxes[:, 2:]
    ends_in = jnp.sum(jnp.square(q - jnp.clip(q, lo, hi)), axis=-1) < radius * radius  # (..., K)
    # At most one box can be overlapped (see above): select its offset from
    # `previous` first, so the square root and division run once per disc.
    away = jnp.sum(jnp.where(ends_in[..., None], p - jnp.clip(p, lo, hi), 0.0), axis=-2)
    dist = norm(away)
    normal = away / jnp.maximum(dist, _EPS)[..., None]
    # The step's component along the normal may not go below -(free gap).
    excess = jnp.minimum(jnp.sum(step * normal, axis=-1) + (dist - radius), 0.0)
    pos = pos - jnp.where(jnp.any(ends_in, axis=-1), excess, 0.0)[..., None] * normal
    return jnp.clip(pos, radius, arena_size - radius)


def fire_orbs(fire: jax.Array, npc_pos: jax.Array, target: jax.Array, orbs: tuple, boxes: jax.Array, orb_range):
    """Launch one orb per firing NPC into its first free slot, aimed at `target`.

    fire: (5,) bool, already checked for alive, cooldown, a free slot and `orb_min_range`.
    orbs: (orb_pos, orb_dir, orb_travel, orb_block, orb_active). Returns them updated.
    An orb flies straight, so where its path enters a box (`orb_block`,
    distance from the launch point; inf if not within `orb_range`) is found
    once here, for the five possible launches, rather than for all ten orbs
    on every tick of their flight.
    """
    orb_pos, orb_dir, orb_travel, orb_block, orb_active = orbs
    first_free = jnp.argmin(orb_active, axis=-1)  # argmin of bools: first False
    slot = (jnp.arange(orb_active.shape[-1]) == first_free[:, None]) & fire[:, None]
    aim = safe_unit(target - npc_pos)
    block = _segment_box_entry(npc_pos, aim, orb_range, boxes)
    orb_pos = jnp.where(slot[..., None], npc_pos[:, None, :], orb_pos)
    orb_dir = jnp.where(slot[..., None], aim[:, None, :], orb_dir)
    orb_travel = jnp.where(slot, 0.0, orb_travel)
    orb_block = jnp.where(slot, block[:, None], orb_block)
    return orb_pos, orb_dir, orb_travel, orb_block, orb_active | slot


def _segment_box_entry(p, direction, length, boxes):
    """Distance along each ray at which it first enters any box within `length` (inf if none).

    Slab test on axis-aligned boxes, vectorised over rays and boxes.
    """
    inv = 1.0 / jnp.where(jnp.abs(direction) < _EPS, _EPS, direction)
    p, inv = p[..., None, :], inv[..., None, :]
    t1 = (boxes[:, :2] - p) * inv
    t2 = (boxes[:, 2:] - p) * inv
    t_near = jnp.max(jnp.minimum(t1, t2), axis=-1)
    t_far = jnp.min(jnp.maximum(t1, t2), axis=-1)
    hit = (t_near <= t_far) & (t_far >= 0.0) & (t_near <= length)
    return jnp.min(jnp.where(hit, jnp.maximum(t_near, 0.0), jnp.inf), axis=-1)


def advance_orbs(orbs: tuple, bot_pos, params):
    """Fly every active orb for one tick and find what it hits first.

    An orb is a point; it hits the bot when its path this tick passes within
    `unit_radius` of the bot's centre before it enters a box. It disappears
    on a hit, on entering a box, on leaving the arena, or after `orb_range`.
    orbs: as `fire_orbs`. Returns (orbs, hits) with hits: (5, 2) bool.
    """
    orb_pos, orb_dir, orb_travel, orb_block, orb_active = orbs
    step = jnp.minimum(params.orb_speed * params.dt, params.orb_range - orb_travel)
    # Ray-circle intersection with the bot.
    f = orb_pos - bot_pos
    b = jnp.sum(f * orb_dir, axis=-1)
    c = jnp.sum(f * f, axis=-1) - params.unit_radius**2
    disc = b * b - c
    t_bot = jnp.maximum(-b - jnp.sqrt(jnp.maximum(disc, 0.0)), 0.0)
    reaches_bot = (disc >= 0.0) & (t_bot <= step) & ((-b >= 0.0) | (c <= 0.0))
    t_box = orb_block - orb_travel  # ahead of the orb's current position
    hits = orb_active & reaches_bot & (t_bot <= t_box)
    new_pos = orb_pos + orb_dir * step[..., None]
    new_travel = orb_travel + step
    inside = jnp.all((new_pos >= 0.0) & (new_pos <= params.arena_size), axis=-1)
    alive = orb_active & ~hits & (t_box > step) & inside & (new_travel < params.orb_range - 1e-4)
    return (new_pos, orb_dir, new_travel, orb_block, alive), hits
