"""The arena environment: five NPCs with one shared policy against a scripted bot."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .bots import BotState, World, scripted_bot
from .checks import check_params, checked_actions
from .environment import Environment
from .formations import SLOT_FEATURES, slot_features
from .learned_bot import learned_move
from .names import (
    BOT_LEARNED,
    BOT_WIN,
    MELEE,
    MOVE_TO_BOT,
    NPC_WIN,
    NUM_ACTIONS,
    NUM_NPCS,
    NUM_TAGS,
    RANGED,
    RETREAT,
    RUNNING,
    STRAFE_LEFT,
    STRAFE_RIGHT,
    TIMEOUT,
    tag_index,
)
from .observe import FACING, can_melee, observe, with_tag
from .physics import advance_orbs, fire_orbs, norm, resolve_collisions, rotate_left, safe_unit
from .rewards import tag_shaping, team_reward
from .spaces import Box, Discrete
from .spawn import initial_state
from .types import OBS_SIZE, EnvParams, EnvState, ticks

# Where "ArenaFormation-v0" and "-v2" put the slot features: after Table 3 and the facing.
FORMATION = slice(FACING.stop, FACING.stop + SLOT_FEATURES)


class Arena(Environment):
    """The paper's 30x30 combat arena, as pure functions over explicit params (an `Environment`).

    Five NPCs (60 HP, 4 u/s, melee 2.5 u for 15 every 0.5 s, plus orbs) fight
    one scripted bot (300 HP, 5 u/s, melee 3.0 u for 15 every 0.8 s). One
    tick is `params.dt` = 0.1 s; an episode times out after `params.episode_s` (120 s).

    Observation: float32 (5, 23), one row per NPC (Table 3):
        [0:3]   self  x/30, z/30, hp/60
        [3:10]  bot   x/30, z/30, hp/300, distance/d_max, can-melee (0/1),
                      nearest cover x/30, nearest cover z/30
        [10:22] four allies in index order, each x/30, z/30, hp/60 (0 if dead)
        [22]    strategy tag / 3 (always 0 in Combination A)
        [23:25] only in "ArenaFacing-v0" and "ArenaFormation-v0"/"-v2": the
                bot's facing, unit x, z
        [25:28] only in "ArenaFormation-v0"/"-v2": the active tag's formation
                slot for this NPC (`jaxarena.formations.slot_features`)
    Action: int32 (5,), one of 6 per NPC (Table 4): 0 move toward the bot,
        1 strafe left, 2 strafe right, 3 melee, 4 retreat, 5 ranged (orb).
        Dead NPCs do nothing. A concrete out-of-range value raises
        ValueError; under `jit`, where values cannot be checked without a
        host round trip, an out-of-range value does nothing.
    Params: concrete params (not traced by `jit` or `vmap`) are checked by
        `reset` and `step` as `jaxarena.make` checks its values: a
        ValueError names the field and its valid range.
    Reward: float32 (5,): the shared team reward (bot damage / 300, +1 kill,
        -1 wipe), which is all `Arena-v0`'s default params pay (Combination
        A's reward). Only with `shaping_weight` > 0, which whoever plays with
        tags sets explicitly (`jaxarena.make(..., shaping_weight=1.0)`; recipe
        B and the protocol's B cells do), each living NPC also gets
        `shaping_weight` x the active tag's Table 5 shaping term.
    Done: () bool. `step` auto-resets; `info` keeps the finished episode's
        outcome (1 NPC win, 2 bot win, 3 timeout), length in seconds,
        `terminated`/`truncated` (a timeout truncates) and `final_obs`.

    Spaces (gymnax-style, `jaxarena.spaces`): `observation_space(params)` is a
    `Box` of shape (5, obs_size), `action_space(params)` a `Discrete(6)` of
    shape (5,). `agents` names the NPCs as JaxMARL does ("npc_0".."npc_4").

    Usage::

        env, params = jaxarena.make("Arena-v0", bot="balanced")
        obs, state = env.reset(key, params)
        obs, state, reward, done, info = env.step(key, state, actions, params)
    """

    num_agents = NUM_NPCS
    num_actions = NUM_ACTIONS
    num_tags = NUM_TAGS

    def __init__(
        self,
        default_params: EnvParams | None = None,
        observe_facing: bool = False,
        scenario: str = "paper",
        observe_formation: bool = False,
        flank_sides: bool = False,
    ):
        """`observe_facing` appends the bot's facing (unit x, z) as obs[23:25].

        Off by default, as in the paper. Table 5's Surround and Flank terms
        reward bearings measured from the bot's facing, which Table 3 leaves
        out; a memoryless policy can only guess it, so "ArenaFacing-v0" exists
        for policies that must follow those tags. `observe_formation` (implies
        the facing) further appends where the active tag asks this NPC to
        stand, `formations.slot_features`, as obs[25:28] ("ArenaFormation-v0").
        `flank_sides` (implies the formation) moves Flank's slot to the bot's
        nearer side, 6 u off it, in the observation and in the intent and obey
        recipes' pay ("ArenaFormation-v2"). `scenario` only records the
        preset `jaxarena.make` built
        `default_params` from.
        """
        self._default_params = default_params if default_params is not None else EnvParams()
        self.flank_sides = bool(flank_sides)
        self.observe_formation = bool(observe_formation) or self.flank_sides
        self.observe_facing = bool(observe_facing) or self.observe_formation
        self.scenario = scenario
        self.obs_size = OBS_SIZE + (2 if self.observe_facing else 0) + (SLOT_FEATURES if self.observe_formation else 0)

    @property
    def env_id(self) -> str:
        """The registry id that builds this variant (see `jaxarena.make`)."""
        if self.observe_formation:
            return "ArenaFormation-v2" if self.flank_sides else "ArenaFormation-v0"
        return "ArenaFacing-v0" if self.observe_facing else "Arena-v0"

    @property
    def name(self) -> str:
        """The environment's name, as gymnax's `env.name`: its registry id."""
        return self.env_id

    @property
    def agents(self) -> list[str]:
        """The NPCs' names in observation-row order, as JaxMARL names agents."""
        return [f"npc_{i}" for i in range(NUM_NPCS)]

    @property
    def default_params(self) -> EnvParams:
        return self._default_params

    def observation_space(self, params: EnvParams | None = None) -> Box:
        """(5, obs_size) float32: Table 3's floats lie in [0, 1], the facing and slot features in [-1, 1]."""
        return Box(observation_low(self.obs_size), 1.0, (NUM_NPCS, self.obs_size), jnp.float32)

    def action_space(self, params: EnvParams | None = None) -> Discrete:
        """(5,) int32, one of the six Table 4 actions per NPC."""
        return Discrete(NUM_ACTIONS, shape=(NUM_NPCS,), dtype=jnp.int32)

    def checked_params(self, params: EnvParams | None) -> EnvParams:
        params = self._default_params if params is None else params
        check_params(params)  # concrete params only: nothing of it enters a compiled program
        return params

    def checked_action(self, actions: jax.Array) -> jax.Array:
        return checked_actions(actions)

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        """Start an episode: (obs (5, obs_size), state). `reset` checks the key and params first."""
        state = initial_state(key, params)
        return self.observe(state, params), state

    def next_episode(self, key: jax.Array, state: EnvState, params: EnvParams) -> EnvState:
        """The episode after `state`'s: `key` draws it (`step` auto-resets; the key is also handed to the
        bot policy, which the shipped bots ignore), keeping the tag. Salting the draw with the episode
        count keeps episodes distinct even when a caller (wrongly) reuses one key for every step."""
        return initial_state(key, params, salt=state.episode + 1).replace(episode=state.episode + 1, tag=state.tag)

    def episode_record(self, info: dict, stepped: EnvState, done, terminated, truncated, params: EnvParams) -> dict:
        """How the step's episode stands (`record_episode`): its outcome where it ended, the final obs."""
        return record_episode(info, done, stepped, terminated, truncated, params, self.observe, outcome_of)

    def observe(self, state: EnvState, params: EnvParams | None = None) -> jax.Array:
        """The (5, obs_size) observation of `state`."""
        params = self._default_params if params is None else params
        obs = observe(state, params)
        if not self.observe_facing:
            return obs
        obs = jnp.concatenate([obs, jnp.broadcast_to(state.bot_facing, (NUM_NPCS, 2))], axis=-1)
        if not self.observe_formation:
            return obs
        return jnp.concatenate([obs, self._slots(state, params)], axis=-1)

    def _slots(self, state: EnvState, params: EnvParams) -> jax.Array:
        """(5, 3) each NPC's way to its formation slot under the state's tag."""
        return slot_features(state.tag, state.npc_pos, state.bot_pos, state.bot_facing, params, self.flank_sides)

    def set_tag(self, state: EnvState, tag) -> EnvState:
        """Set the strategy tag (0 Surround, 1 Aggressive, 2 Flank, 3 Retreat), by code or name ("Flank").

        A concrete tag outside 0..3 or an unknown name raises ValueError; a traced one is clipped into 0..3.
        """
        tag = tag_index(tag) if isinstance(tag, str) else tag
        if not isinstance(tag, jax.core.Tracer):
            value = np.asarray(tag)  # numpy, so the check also runs while tracing
            if value.shape != () or not np.issubdtype(value.dtype, np.integer):
                raise TypeError(f"tag must be a scalar integer, got {value.dtype}{list(value.shape)}")
            if not 0 <= int(value) < NUM_TAGS:
                raise ValueError(f"tag must be in 0..{NUM_TAGS - 1}, got {int(value)}")
        return state.replace(tag=jnp.clip(jnp.asarray(tag, jnp.int32), 0, NUM_TAGS - 1))

    def retag(self, obs: jax.Array, state: EnvState, tag, params: EnvParams | None = None):
        """Change the strategy tag of a running episode: `(obs, state)` with both carrying `tag`.

        The one way to change the tag between observing and acting (`set_tag` leaves the obs stale); checks as it.
        """
        state = self.set_tag(state, tag)
        obs = with_tag(obs, state.tag)
        if self.observe_formation:  # the slots move with the tag
            params = self._default_params if params is None else params
            obs = obs.at[..., FORMATION].set(self._slots(state, params))
        return obs, state

    def step_env(self, key: jax.Array, state: EnvState, actions: jax.Array, params: EnvParams, bot_action=None):
        """One tick without auto-reset: (state, reward, terminated, truncated, info).

        Where `params.bot_type` is `BOT_LEARNED` the bot moves along the
        heading of a learned action (`jaxarena.learned_bot`): `bot_action`, a
        scalar int, if given (a trainer driving the bot), else one drawn from
        `params.bot_weights`. Other bot types ignore both. With neither given
        the learned branch is not even traced, so the scripted arena's program
        is unchanged.

        Order within a tick: (1) the bot decides from the tick's starting
        state; (2) melee strikes and orb launches resolve simultaneously on
        the starting positions, which is what the observation showed; (3)
        every unit moves and is pushed out of boxes and walls; (4) orbs fly
        towards the bot's new position; (5) damage applies, cooldowns tick.
        """
        alive = state.npc_hp > 0.0
        valid = (actions >= 0) & (actions < NUM_ACTIONS)
        act = jnp.where(alive & valid, actions, -1)  # -1: no-op

        world = World(state.bot_pos, state.bot_hp, state.npc_pos, alive)
        bot = BotState(state.bot_mode, state.bot_phase_ticks, state.bot_phase_s)
        bot_move, bot_attack, target, bot = scripted_bot(key, bot, world, params)
        if bot_action is not None or params.bot_weights is not None:
            # bot_type is traced, so a vmapped batch mixes learned and scripted lanes.
            learned = jnp.asarray(params.bot_type, jnp.int32) == BOT_LEARNED
            heading, mode = learned_move(key, state, params, target, bot_action)
            bot_move = jnp.where(learned, heading, bot_move)
            bot = bot._replace(mode=jnp.where(learned, mode, bot.mode))

        # (2) Attacks on the starting positions.
        melee = (act == MELEE) & can_melee(state, params)
        bot_strikes = bot_attack & (state.bot_melee_cd == 0)
        # A cleave (scenario rule) strikes every living NPC in range, not just the target.
        in_reach = alive & (norm(state.npc_pos - state.bot_pos) <= params.bot_melee_range)
        hit_npc = jnp.where(params.bot_cleave > 0.5, in_reach, jnp.arange(NUM_NPCS) == target) & bot_strikes
        fire = (act == RANGED) & (state.npc_orb_cd == 0) & ~jnp.all(state.orb_active, axis=-1)
        fire &= norm(state.npc_pos - state.bot_pos) >= params.orb_min_range
        orb_active = state.orb_active & alive[:, None]  # a dead NPC's orbs vanish
        orbs = (state.orb_pos, state.orb_dir, state.orb_travel, state.orb_block, orb_active)
        orbs = fire_orbs(fire, state.npc_pos, state.bot_pos, orbs, params.boxes, params.orb_range)

        # (3) Movement.
        npc_pos, bot_pos = move_units(state, act, bot_move, params)

        # (4) Orbs fly.
        (orb_pos, orb_dir, orb_travel, orb_block, orb_active), orb_hits = advance_orbs(orbs, bot_pos, params)

        # (5) Damage and cooldowns.
        dealt = melee * params.npc_melee_damage + jnp.sum(orb_hits, axis=-1) * params.orb_damage
        bot_hp = jnp.maximum(state.bot_hp - jnp.sum(dealt), 0.0)
        # On the killing blow, credit each NPC its share of the HP actually left.
        dealt = dealt * ((state.bot_hp - bot_hp) / jnp.maximum(jnp.sum(dealt), 1e-6))
        taken = jnp.minimum(hit_npc * params.bot_melee_damage, state.npc_hp)
        npc_hp = state.npc_hp - taken

        def cool(cd, used, seconds):
            return jnp.maximum(jnp.where(used, ticks(seconds, params.dt), cd) - 1, 0)

        displacement = norm(bot_pos - state.bot_pos)
        facing = bot_facing(state, bot_pos, target, alive)
        t = state.t + 1
        stepped = state.replace(
            npc_pos=npc_pos,
            npc_hp=npc_hp,
            npc_melee_cd=cool(state.npc_melee_cd, melee, params.npc_melee_cooldown),
            npc_orb_cd=cool(state.npc_orb_cd, fire, params.orb_cooldown),
            orb_pos=orb_pos,
            orb_dir=orb_dir,
            orb_travel=orb_travel,
            orb_block=orb_block,
            orb_active=orb_active,
            bot_pos=bot_pos,
            bot_hp=bot_hp,
            bot_melee_cd=cool(state.bot_melee_cd, bot_strikes, params.bot_melee_cooldown),
            bot_facing=facing,
            bot_moving=displacement > 1e-3,
            bot_mode=bot.mode,
            bot_phase_ticks=bot.phase_ticks,
            t=t,
            damage_dealt=state.damage_dealt + (state.bot_hp - bot_hp),
            damage_taken=state.damage_taken + jnp.sum(taken),
        )

        bot_killed = bot_hp <= 0.0
        # If both fall on one tick the NPCs win, and the reward agrees: no wipe penalty.
        squad_wiped = jnp.all(npc_hp <= 0.0) & ~bot_killed
        terminated = bot_killed | squad_wiped
        truncated = ~terminated & (t >= ticks(params.episode_s, params.dt))
        now_alive = npc_hp > 0.0
        shaped = tag_shaping(state.tag, npc_pos, bot_pos, facing, now_alive, params, self.flank_sides) * now_alive
        reward = team_reward(state.bot_hp - bot_hp, bot_killed, squad_wiped, params) + params.shaping_weight * shaped
        info = {
            "alive": alive,
            "damage_dealt": dealt,
            "damage_taken": taken,
            "tag": state.tag,
            "bot_mode": bot.mode,
        }
        return stepped, reward.astype(jnp.float32), terminated, truncated, info


def record_episode(info, done, stepped, terminated, truncated, params, observe_fn, outcome_fn) -> dict:
    """`info` with the step's episode record: its outcome where it ended (else `RUNNING`), its time, how
    it ended, and the observation it ended on (`final_obs`, before any reset)."""
    info.update(
        outcome=jnp.where(done, outcome_fn(stepped), RUNNING),
        episode_time=stepped.t.astype(jnp.float32) * params.dt,
        terminated=terminated,
        truncated=truncated,
        final_obs=observe_fn(stepped, params),
    )
    return info


def auto_reset(done, fresh, stepped, terminated, truncated, info, params, observe_fn, outcome_fn):
    """`fresh` where the episode is `done`, else `stepped`, and `info`'s episode record, for the
    batch-last layout of `BatchedArena.step`, which passes its own observation and outcome functions
    (`Environment.step` does the same for one arena). Returns (observation of the next state, next state).
    """
    next_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
    record_episode(info, done, stepped, terminated, truncated, params, observe_fn, outcome_fn)
    return observe_fn(next_state, params), next_state


def move_units(state: EnvState, act: jax.Array, bot_move: jax.Array, params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """Every unit's position after one tick of movement, pushed out of boxes and walls: (npc_pos, bot_pos).

    NPC directions are relative to the bot: strafing is along the NPC's left/right while it faces
    the bot. All units move at once from the tick's starting positions."""
    to_bot = safe_unit(state.bot_pos - state.npc_pos)
    left = rotate_left(to_bot)
    npc_dir = jnp.select(
        [
            act[:, None] == MOVE_TO_BOT,
            act[:, None] == STRAFE_LEFT,
            act[:, None] == STRAFE_RIGHT,
            act[:, None] == RETREAT,
        ],
        [to_bot, left, -left, -to_bot],
        0.0,
    )
    start = jnp.concatenate([state.npc_pos, state.bot_pos[None]])
    step = jnp.concatenate(
        [npc_dir * (params.npc_speed * params.dt), (bot_move * (params.bot_speed * params.dt))[None]]
    )
    moved = resolve_collisions(start + step, start, params.unit_radius, params.boxes, params.arena_size)
    return moved[:NUM_NPCS], moved[NUM_NPCS]


def bot_facing(state: EnvState, bot_pos: jax.Array, target: jax.Array, alive: jax.Array) -> jax.Array:
    """Where the bot faces after moving: along its move, else towards its target while any NPC lives,
    else as before (a degenerate direction keeps the old facing)."""
    displacement = norm(bot_pos - state.bot_pos)
    to_target = safe_unit(state.npc_pos[target] - state.bot_pos)
    facing = jnp.where(
        displacement > 1e-3,
        safe_unit(bot_pos - state.bot_pos),
        jnp.where(jnp.any(alive), to_target, state.bot_facing),
    )
    return jnp.where(norm(facing) > 0.5, facing, state.bot_facing)


def outcome_of(state: EnvState) -> jax.Array:
    """How an episode that has ended came out: NPC_WIN if the bot is down
    (even if the squad fell on the same tick), else BOT_WIN if the squad is
    down, else TIMEOUT. Only meaningful once the episode is over."""
    return jnp.select(
        [state.bot_hp <= 0.0, jnp.all(state.npc_hp <= 0.0)],
        [jnp.int32(NPC_WIN), jnp.int32(BOT_WIN)],
        jnp.int32(TIMEOUT),
    )


def observation_low(obs_size: int) -> np.ndarray:
    """(obs_size,) float32 lower bounds of an observation row: 0 for Table 3's floats, -1 for the extras."""
    return np.where(np.arange(obs_size) < OBS_SIZE, 0.0, -1.0).astype(np.float32)
