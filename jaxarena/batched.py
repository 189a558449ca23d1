"""`BatchedArena`: N arenas stepped at once, the batch as every state array's last axis.

`jax.vmap(env.step)` runs each of the step's fused loops over one arena's short axes (x/z, five
NPCs, five boxes), which XLA:CPU does not vectorise. `BatchedArena.step` plays the same rules
with every loop over the N arenas, 1.6-2.4x faster on a CPU (docs/benchmarks.md, "The step's
roofline"). It takes and returns what the vmapped step does (keys (N,), actions (N, 5); obs
(N, 5, 23), reward (N, 5), done (N,), info) except the state, whose leaves carry the batch last:
`batch_first` and `batch_last` convert. Float order differs from `Arena.step` in the last bits
(the x/z sums are written out), so episodes agree tick by tick to rounding and then drift apart
as chaotic games do; outcome rates agree (tests/test_batched.py).

It covers `Arena-v0` with the scripted bots and Table 5's shaping (`shaping_recipe` 0). Params
are shared by all arenas, or per arena with each leaf's batch last (`batch_last(params)` of a
vmapped params).

    env, params = jaxarena.make("Arena-v0", bot="balanced")
    batched = jaxarena.BatchedArena(env)
    obs, state = batched.reset(jax.random.split(key, 4096), params)
    obs, state, reward, done, info = batched.step(keys, state, actions, params)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena.batched_rules as rules

from .checks import check_params, check_range
from .env import Arena, auto_reset
from .names import BOT_BALANCED, BOT_EVASIVE, BOT_LEARNED, BOT_WIN, NPC_WIN, NUM_NPCS, NUM_TAGS, TIMEOUT
from .spawn import _NUM_UNIFORMS, _mix32
from .types import ORBS_PER_NPC, EnvParams, EnvState, arena_diagonal, ticks

NPCS = rules.NPCS


def batch_last(tree):
    """Move every leaf's leading (batch) axis last: a vmapped state or params -> `BatchedArena`'s layout."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, 0, -1), tree)


def batch_first(tree):
    """Move every leaf's last (batch) axis first: `BatchedArena`'s state -> what `jax.vmap(env.step)` carries."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), tree)


def batch_size(state: EnvState) -> int:
    """N, the arenas of a batch-last state; a ValueError saying how to convert a state of another layout."""
    t, pos = jnp.shape(state.t), jnp.shape(state.npc_pos)
    if len(t) == 1 and pos == (NUM_NPCS, 2, t[0]):
        return t[0]
    if len(t) == 1 and pos == (t[0], NUM_NPCS, 2):
        raise ValueError(
            f"BatchedArena wants the state batch-last, as its reset returns it (npc_pos ({NUM_NPCS}, 2, N)); this "
            f"one is batch-first (npc_pos {pos}), as jax.vmap(env.reset) returns it: pass "
            "jaxarena.batched.batch_last(state)"
        )
    raise ValueError(
        f"BatchedArena wants a batch-last state of N arenas, as its reset returns it (t (N,), npc_pos "
        f"({NUM_NPCS}, 2, N)), got t {t} and npc_pos {pos}"
    )


class BatchedArena:
    """N `Arena-v0` arenas stepped at once; see the module docstring."""

    def __init__(self, env: Arena | str | None = None):
        """`env`: an `Arena` (`jaxarena.make(...)[0]`), or an env id, "Arena-v0", that `jaxarena.make` builds."""
        if isinstance(env, str):
            from .registry import make

            env = make(env)[0]
        env = Arena() if env is None else env
        if not isinstance(env, Arena):
            pair = " (jaxarena.make returns (env, params): pass env)" if isinstance(env, tuple) else ""
            raise TypeError(
                f"BatchedArena takes an Arena or an env id, e.g. 'Arena-v0', got {type(env).__name__}{pair}"
            )
        if env.observe_facing or env.observe_formation:
            raise ValueError(
                f"BatchedArena plays Arena-v0's observation; {env.env_id} is not supported: use jax.vmap(env.step)"
            )
        self.env = env
        self.num_agents, self.num_actions, self.obs_size = env.num_agents, env.num_actions, env.obs_size

    def checked_params(self, params: EnvParams | None) -> EnvParams:
        """`params` (default: the env's), or ValueError where these rules do not play them."""
        params = self.env.default_params if params is None else params
        if params.bot_weights is not None:
            raise ValueError("BatchedArena plays the scripted bots: use jax.vmap(env.step) for the learned bot")
        boxes = jnp.shape(params.boxes)
        if len(boxes) not in (2, 3) or boxes[1] != 4:
            raise ValueError(
                f"params.boxes must be (K, 4), or (K, 4, N) for per-arena params, got {boxes}: "
                "pass jaxarena.batched.batch_last(params) for params vmapped batch-first"
            )
        for name, value, limit in (
            ("bot_type", params.bot_type, BOT_LEARNED),
            ("shaping_recipe", params.shaping_recipe, 1),
        ):
            if isinstance(value, jax.core.Tracer):
                continue  # checked in the step instead: such an arena's reward is NaN (see `step_env`)
            top = int(np.max(np.asarray(value)))
            if top >= limit:
                raise ValueError(
                    f"BatchedArena supports {name} < {limit}, got {top}: "
                    "use jax.vmap(env.step) for the learned bot and the intent and obey shaping"
                )
        check_params(params)  # as env.step checks them: concrete values only
        return params

    @staticmethod
    def _keys(keys) -> jax.Array:
        keys = jnp.asarray(keys)
        typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        if not (typed and keys.ndim == 1) and not (keys.dtype == jnp.uint32 and keys.ndim == 2):
            raise TypeError(f"keys must be N PRNG keys, jax.random.split(key, N), got {keys.dtype}{list(keys.shape)}")
        return keys

    def reset(self, keys: jax.Array, params: EnvParams | None = None):
        """N fresh episodes, as `jax.vmap(env.reset)` draws them: (obs (N, 5, 23), batch-last state)."""
        params, keys = self.checked_params(params), self._keys(keys)
        state = initial_state(keys, params, jnp.zeros(keys.shape[:1], jnp.int32))
        return observe(state, params), state

    def step(self, keys: jax.Array, state: EnvState, actions: jax.Array, params: EnvParams | None = None):
        """One tick of every arena with auto-reset: as `jax.vmap(env.step)`, the state batch-last."""
        raw = actions
        params, keys, actions = self.checked_params(params), self._keys(keys), jnp.asarray(actions)
        n = batch_size(state)
        if actions.shape != (n, NUM_NPCS) or keys.shape[0] != n:
            raise ValueError(
                f"a state of {n} arenas needs actions of shape ({n}, {NUM_NPCS}) and {n} keys, "
                f"got actions {actions.shape} and {keys.shape[0]} keys"
            )
        if not jnp.issubdtype(actions.dtype, jnp.integer):
            raise TypeError(f"actions must be integers in 0..{self.num_actions - 1}, got dtype {actions.dtype}")
        check_range(raw, self.num_actions, "each NPC's action (Table 4)")  # as env.step refuses it
        stepped, reward, terminated, truncated, info = step_env(state, actions.T.astype(jnp.int32), params)
        # A reduction (see rules.keep): else XLA recomputes the whole tick in every field's select.
        (done,) = rules.keep(terminated | truncated)
        fresh = initial_state(keys, params, state.episode + 1).replace(episode=state.episode + 1, tag=state.tag)
        obs, next_state = auto_reset(done, fresh, stepped, terminated, truncated, info, params, observe, outcome_of)
        return obs, next_state, reward, done, info


def step_env(s: EnvState, act: jax.Array, params: EnvParams):
    """One tick without auto-reset, actions (5, N): (state, reward (N, 5), terminated, truncated, info)."""
    nx, nz = [s.npc_pos[i, 0] for i in NPCS], [s.npc_pos[i, 1] for i in NPCS]
    bx, bz = s.bot_pos[0], s.bot_pos[1]
    alive = [s.npc_hp[i] > 0.0 for i in NPCS]
    act = rules.valid_actions(act, alive)
    mx, mz, attack, target, mode, phase_ticks = rules.scripted_bot(s, nx, nz, alive, params)
    mx, mz, attack, target = rules.keep(mx, mz, attack, target)

    # Attacks on the starting positions.
    bot_strikes = attack & (s.bot_melee_cd == 0)
    dist = [rules.norm(nx[i] - bx, nz[i] - bz) for i in NPCS]
    melee = [rules.melee_lands(s, act, alive, i, dist[i], params) for i in NPCS]
    cleave = params.bot_cleave > 0.5
    in_reach = [alive[i] & (dist[i] <= params.bot_melee_range) for i in NPCS]
    hit_npc = [jnp.where(cleave, in_reach[i], target == i) & bot_strikes for i in NPCS]
    orbs = rules.orb_lists(s)
    fire = rules.launch_orbs(s, orbs, act, nx, nz, alive, params)

    # Movement, then the orbs fly towards the bot's new position.
    moved = [rules.move_npc(nx[i], nz[i], bx, bz, act[i], params) for i in NPCS]
    bot_step = params.bot_speed * params.dt
    nbx, nbz, *new_x = rules.keep(
        *rules.resolve(bx + mx * bot_step, bz + mz * bot_step, bx, bz, params), *[m[0] for m in moved]
    )
    new_z = rules.keep(*[m[1] for m in moved])
    hits = rules.fly_orbs(orbs, nbx, nbz, params)

    # Damage and cooldowns.
    dealt = [melee[i] * params.npc_melee_damage + hits[i] * params.orb_damage for i in NPCS]
    total = dealt[0] + dealt[1] + dealt[2] + dealt[3] + dealt[4]
    (bot_hp,) = rules.keep(jnp.maximum(s.bot_hp - total, 0.0))
    share = (s.bot_hp - bot_hp) / jnp.maximum(total, 1e-6)  # the killing blow credits the HP left
    taken = [jnp.minimum(hit_npc[i] * params.bot_melee_damage, s.npc_hp[i]) for i in NPCS]
    npc_hp = rules.keep(*[s.npc_hp[i] - taken[i] for i in NPCS])
    fx, fz = rules.keep(*bot_facing(s, nbx, nbz, nx, nz, target, alive))

    def cool(cd, used, seconds):
        return jnp.maximum(jnp.where(used, ticks(seconds, params.dt), cd) - 1, 0)

    def per_orb(field):
        return jnp.stack([jnp.stack(orbs[field][i]) for i in NPCS])

    t = s.t + 1
    stepped = s.replace(
        npc_pos=jnp.stack([jnp.stack([new_x[i], new_z[i]]) for i in NPCS]),
        npc_hp=jnp.stack(npc_hp),
        npc_melee_cd=jnp.stack([cool(s.npc_melee_cd[i], melee[i], params.npc_melee_cooldown) for i in NPCS]),
        npc_orb_cd=jnp.stack([cool(s.npc_orb_cd[i], fire[i], params.orb_cooldown) for i in NPCS]),
        orb_pos=jnp.stack([per_orb("x"), per_orb("z")], axis=2),
        orb_dir=jnp.stack([per_orb("dx"), per_orb("dz")], axis=2),
        orb_travel=per_orb("travel"),
        orb_block=per_orb("block"),
        orb_active=per_orb("active"),
        bot_pos=jnp.stack([nbx, nbz]),
        bot_hp=bot_hp,
        bot_melee_cd=cool(s.bot_melee_cd, bot_strikes, params.bot_melee_cooldown),
        bot_facing=jnp.stack([fx, fz]),
        bot_moving=rules.norm(nbx - bx, nbz - bz) > 1e-3,
        bot_mode=mode,
        bot_phase_ticks=phase_ticks,
        t=t,
        damage_dealt=s.damage_dealt + (s.bot_hp - bot_hp),
        damage_taken=s.damage_taken + (taken[0] + taken[1] + taken[2] + taken[3] + taken[4]),
    )
    killed = bot_hp <= 0.0
    wiped = (npc_hp[0] <= 0.0) & (npc_hp[1] <= 0.0) & (npc_hp[2] <= 0.0) & (npc_hp[3] <= 0.0) & (npc_hp[4] <= 0.0)
    wiped = wiped & ~killed  # both on one tick: the NPCs win
    terminated = killed | wiped
    truncated = ~terminated & (t >= ticks(params.episode_s, params.dt))
    team = (
        (s.bot_hp - bot_hp) * params.damage_reward_scale
        + jnp.where(killed, params.kill_reward, 0.0)
        + jnp.where(wiped, params.wipe_penalty, 0.0)
    )
    shaped = [
        rules.paper_shaping(s.tag, new_x[i], new_z[i], nbx, nbz, fx, fz, params) * (npc_hp[i] > 0.0) for i in NPCS
    ]
    # A traced bot_type or shaping_recipe that these rules do not play cannot be refused at trace
    # time (`BatchedArena._params` refuses concrete ones): such an arena's reward is NaN, not wrong.
    unsupported = (jnp.asarray(params.bot_type) >= BOT_LEARNED) | (jnp.asarray(params.shaping_recipe) != 0)
    team = jnp.where(unsupported, jnp.nan, team)
    reward = jnp.stack([team + params.shaping_weight * shaped[i] for i in NPCS], axis=-1)
    info = {
        "alive": jnp.stack(alive, axis=-1),
        "damage_dealt": jnp.stack([d * share for d in dealt], axis=-1),
        "damage_taken": jnp.stack(taken, axis=-1),
        "tag": s.tag,
        "bot_mode": mode,
    }
    return stepped, reward.astype(jnp.float32), terminated, truncated, info


def bot_facing(s, nbx, nbz, nx, nz, target, alive):
    """`env.bot_facing`: along the bot's move, else towards its target while any NPC lives, else as before."""
    bx, bz, old_x, old_z = s.bot_pos[0], s.bot_pos[1], s.bot_facing[0], s.bot_facing[1]
    mx, mz = rules.unit(nbx - bx, nbz - bz)
    gx, gz = rules.unit(rules.pick(nx, target) - bx, rules.pick(nz, target) - bz)
    moved = rules.norm(nbx - bx, nbz - bz) > 1e-3
    any_alive = alive[0] | alive[1] | alive[2] | alive[3] | alive[4]
    x = jnp.where(moved, mx, jnp.where(any_alive, gx, old_x))
    z = jnp.where(moved, mz, jnp.where(any_alive, gz, old_z))
    keep = rules.norm(x, z) > 0.5
    return jnp.where(keep, x, old_x), jnp.where(keep, z, old_z)


def initial_state(keys: jax.Array, params: EnvParams, salt: jax.Array) -> EnvState:
    """`spawn.initial_state` for N keys and salts, batch-last: the same hash, so the same draws."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        keys = jax.random.key_data(keys)
    words = keys.reshape(keys.shape[0], -1).astype(jnp.uint32)
    first, last = words[:, 0], words[:, -1]
    salt = salt.astype(jnp.uint32) * jnp.uint32(0x85EBCA6B)
    seed = _mix32(first ^ _mix32(last + jnp.uint32(0x9E3779B9) + salt))
    counters = (jnp.arange(_NUM_UNIFORMS, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9))[:, None]
    u = (_mix32(seed ^ _mix32(counters + last)) >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))

    def in_zone(ux, uz, zone):
        return jnp.stack([zone[0] + ux * (zone[2] - zone[0]), zone[1] + uz * (zone[3] - zone[1])])

    n, k = keys.shape[0], 2 * NUM_NPCS
    lo, hi = jnp.float32(params.balanced_phase_min_s), jnp.float32(params.balanced_phase_max_s)
    phase_s = lo + u[-2:] * (hi - lo)
    bot_type = jnp.asarray(params.bot_type, jnp.int32)
    mode = jnp.where(
        bot_type == BOT_BALANCED, (u[-3] < 0.5).astype(jnp.int32), (bot_type == BOT_EVASIVE).astype(jnp.int32)
    )
    first_phase = jnp.where(mode == 1, phase_s[1], phase_s[0])
    zeros, izeros = jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.int32)
    orbs = (NUM_NPCS, ORBS_PER_NPC, n)
    return EnvState(
        npc_pos=jnp.stack([in_zone(u[2 * i], u[2 * i + 1], params.npc_spawn) for i in NPCS]),
        npc_hp=jnp.broadcast_to(jnp.asarray(params.npc_hp, jnp.float32), (NUM_NPCS, n)),
        npc_melee_cd=jnp.zeros((NUM_NPCS, n), jnp.int32),
        npc_orb_cd=jnp.zeros((NUM_NPCS, n), jnp.int32),
        orb_pos=jnp.zeros((NUM_NPCS, ORBS_PER_NPC, 2, n), jnp.float32),
        orb_dir=jnp.zeros((NUM_NPCS, ORBS_PER_NPC, 2, n), jnp.float32),
        orb_travel=jnp.zeros(orbs, jnp.float32),
        orb_block=jnp.full(orbs, jnp.inf, jnp.float32),
        orb_active=jnp.zeros(orbs, bool),
        bot_pos=in_zone(u[k], u[k + 1], params.bot_spawn),
        bot_hp=jnp.broadcast_to(jnp.asarray(params.bot_hp, jnp.float32), (n,)),
        bot_melee_cd=izeros,
        bot_facing=jnp.stack([zeros, jnp.full((n,), -1.0, jnp.float32)]),  # towards the squad's side
        bot_moving=jnp.zeros((n,), bool),
        bot_mode=mode,
        bot_phase_ticks=ticks(first_phase, params.dt) + 1,
        bot_phase_s=phase_s,
        tag=izeros,
        t=izeros,
        damage_dealt=zeros,
        damage_taken=zeros,
        episode=izeros,  # as spawn.initial_state's; `step` sets the count
    )


def observe(s: EnvState, params: EnvParams) -> jax.Array:
    """(N, 5, 23) Table 3 observations of a batch-last state, batch-first as a learner reads them."""
    size = params.arena_size
    bx, bz = s.bot_pos[0], s.bot_pos[1]
    own = [[s.npc_pos[i, 0] / size, s.npc_pos[i, 1] / size, s.npc_hp[i] / params.npc_hp] for i in NPCS]
    bot = [bx / size, bz / size, s.bot_hp / params.bot_hp]
    tag = s.tag.astype(jnp.float32) / (NUM_TAGS - 1)
    rows = []
    for i in NPCS:
        x, z = s.npc_pos[i, 0], s.npc_pos[i, 1]
        dist = rules.norm(x - bx, z - bz)
        can = (s.npc_hp[i] > 0.0) & (s.npc_melee_cd[i] == 0) & (dist <= params.npc_melee_range)
        cover_x, cover_z, best = x, z, jnp.full_like(x, jnp.inf)  # `physics.nearest_box_point`
        for lx, lz, hx, hz in rules.boxes(params):
            px, pz = jnp.clip(x, lx, hx), jnp.clip(z, lz, hz)
            d2 = (px - x) ** 2 + (pz - z) ** 2
            closer = d2 < best
            cover_x, cover_z = jnp.where(closer, px, cover_x), jnp.where(closer, pz, cover_z)
            best = jnp.where(closer, d2, best)
        allies = [v for j in NPCS if j != i for v in own[j]]
        features = [dist / arena_diagonal(params), can.astype(jnp.float32), cover_x / size, cover_z / size]
        rows.append(jnp.stack(own[i] + bot + features + allies + [tag], axis=-1))
    return jnp.stack(rows, axis=-2)


def outcome_of(s: EnvState) -> jax.Array:
    """`env.outcome_of` per arena: NPC_WIN, else BOT_WIN, else TIMEOUT."""
    wiped = jnp.all(s.npc_hp <= 0.0, axis=0)
    return jnp.where(s.bot_hp <= 0.0, NPC_WIN, jnp.where(wiped, BOT_WIN, TIMEOUT)).astype(jnp.int32)
