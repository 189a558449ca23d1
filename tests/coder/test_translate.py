"""The translator: programs give the same actions as the scripted squads they mirror, and as Python would.

The differential tests run each (trusted, test-owned) program twice: translated to JAX, and executed by
the Python interpreter on plain floats with a plain-Python copy of the helpers. The language is a Python
subset, so the two must agree action for action; the translator never executes a program.
"""

import math
import re
import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.coder import limits
from jaxarena.coder.language import ACTIONS, CONSTANTS
from jaxarena.coder.program_error import ProgramError
from jaxarena.coder.translate import translate
from jaxarena.names import MELEE, RANGED
from jaxarena.policies import chase_and_orb_policy, focus_fire_policy, kite_policy
from jaxarena.runner import make_runner

FOCUS_FIRE = """
def policy(obs):
    if obs.bot.can_attack:
        return MELEE
    return MOVE_TO_BOT
"""

KITE = """
def policy(obs):
    d = obs.bot.distance
    fire = random() < 0.8
    if d < 6:
        return RETREAT
    elif d > 11:
        return MOVE_TO_BOT
    elif fire:
        return RANGED
    return MOVE_TO_BOT if d > 8.5 else RETREAT
"""

CHASE_AND_ORB = """
def policy(obs):
    fire = obs.bot.distance < 11 and random() < 0.8
    return MELEE if can_attack() else (RANGED if fire else MOVE_TO_BOT)
"""


def random_obs(key, batch, dead=0.3):
    """Observations with every entry in [0, 1), can-attack 0/1 and some units dead (HP 0)."""
    k1, k2, k3 = jax.random.split(key, 3)
    obs = jax.random.uniform(k1, (*batch, 5, 23))
    obs = obs.at[..., 7].set(jax.random.bernoulli(k2, 0.4, (*batch, 5)).astype(jnp.float32))
    hp_cols = jnp.array([2, 12, 15, 18, 21])
    dead_mask = jax.random.bernoulli(k3, dead, (*batch, 5, 5))
    return obs.at[..., hp_cols].set(jnp.where(dead_mask, 0.0, obs[..., hp_cols]))


def rollout_obs(num_episodes=6, bot="aggressive"):
    """Real observations: every tick of the first 5 s of a few episodes of a random squad."""
    env, params = jaxarena.make("Arena-v0", bot=bot)
    run = make_runner(
        env, params, jaxarena.policies.random_policy, 0, num_episodes, num_periods=1, trace=lambda tick: tick.obs
    )
    return run(None, params, jax.random.key(5)).trace  # (50, N, 5, 23)


def test_focus_fire_mirror_gives_identical_actions():
    policy = jax.jit(translate(FOCUS_FIRE))
    key = jax.random.key(0)
    for obs in (random_obs(jax.random.key(1), (2000,)), rollout_obs()):
        got = policy(None, obs, key)
        chex.assert_shape(got, obs.shape[:-1])
        chex.assert_type(got, jnp.int32)
        np.testing.assert_array_equal(got, focus_fire_policy(None, obs, key))
        assert len(np.unique(got)) == 2  # both branches were taken


@pytest.mark.parametrize("source,reference", [(KITE, kite_policy), (CHASE_AND_ORB, chase_and_orb_policy)])
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_random_mirrors_match_the_scripted_squads_under_the_same_key(source, reference):
    # The first random() of a program draws with the policy key itself, as the scripted squads do.
    policy = jax.jit(translate(source))
    obs = random_obs(jax.random.key(2), (1000,))
    obs = obs.at[..., 6].multiply(0.5)  # distances 0..21 u, so every band is visited
    for seed in range(3):
        key = jax.random.key(seed)
        got = policy(None, obs, key)
        np.testing.assert_array_equal(got, reference(None, obs, key))
    assert len(np.unique(got)) >= 3


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_shapes_dtypes_jit_and_vmap():
    policy = translate(KITE)
    key = jax.random.key(0)
    for batch in ((), (3,), (2, 4)):
        obs = random_obs(jax.random.key(1), batch)
        out = jax.jit(policy)(None, obs, key)
        chex.assert_shape(out, (*batch, 5))
        chex.assert_type(out, jnp.int32)
    obs = random_obs(jax.random.key(1), (8,))
    keys = jax.random.split(key, 8)
    vmapped = jax.vmap(policy, in_axes=(None, 0, 0))(None, obs, keys)
    looped = jnp.stack([policy(None, obs[i], keys[i]) for i in range(8)])
    np.testing.assert_array_equal(vmapped, looped)
    with pytest.raises(ValueError, match=r"\(\.\.\., 5, 23\)"):
        policy(None, jnp.zeros((5, 25)), key)


def test_each_random_call_draws_afresh():
    policy = jax.jit(
        translate("""
def policy(obs):
    a = random()
    b = random()
    if a < 0.5:
        return MELEE if b < 0.5 else RANGED
    return RETREAT if b < 0.5 else MOVE_TO_BOT
""")
    )
    out = np.asarray(policy(None, jnp.zeros((4000, 5, 23)), jax.random.key(7)))
    freq = np.bincount(out.ravel(), minlength=6)[[3, 5, 4, 0]] / out.size
    np.testing.assert_allclose(freq, 0.25, atol=0.02)  # two independent fair coins
    assert len(np.unique(out[:2, :].ravel())) > 1  # NPCs do not share draws


# -- differential tests against Python's own semantics

TRACED_CONTROL_FLOW = """
LOW = 25
def pick(obs):
    best = 1000.0
    k = -1
    for i in range(4):
        a = obs.allies[i]
        if a.alive and a.distance < best:
            best = a.distance
            k = i
    return k

def policy(obs):
    k = pick(obs)
    if k < 0:
        return RANGED
    elif k == 0:
        return MELEE
    elif k == 1 and obs.me.hp > LOW:
        return STRAFE_LEFT
    if k == 2:
        return STRAFE_RIGHT
    return RETREAT
"""

RETURN_IN_LOOP = """
def policy(obs):
    for ally in obs.allies:
        if ally.alive and ally.hp < 20:
            if ally.index < obs.index:
                return STRAFE_LEFT
            return STRAFE_RIGHT
    total = 0
    for i in range(4):
        if i == 2:
            pass
        else:
            total += obs.allies[i].hp
    if total > 90:
        return MELEE
    return MOVE_TO_BOT
"""

ARITHMETIC = """
def policy(obs):
    v = (obs.me.x - 15) // 4
    w = (obs.me.z - 15) % 7
    u = -obs.bot.x / 3 + 2 ** 2 - 7 // 2 + 7 % 3
    if v < -1 and w > 3:
        return MELEE
    if 0 <= v < 2 or u < -3:
        return RANGED
    n = 0
    n += obs.index * 2
    n -= 1
    n *= 3
    if n > 10 and not (w < 1):
        return RETREAT
    return STRAFE_LEFT if abs(u - v) > 2.5 else STRAFE_RIGHT
"""

HELPERS_AND_LOGIC = """
def policy(obs):
    t = nearest(obs.allies)
    w = weakest(obs.allies)
    c = centroid(obs.allies)
    if count_alive(obs.allies) < 2 or not obs.me.alive:
        return RETREAT
    if in_range(obs.me, obs.bot, 6) and (obs.bot.hp < 150 or obs.index == 0):
        return MELEE
    turn = angle_diff(bearing(obs.bot, obs.me), bearing(obs.bot, c) + radians(72))
    if distance(t, w) < 3 and t.alive:
        return STRAFE_LEFT if turn > 0 else STRAFE_RIGHT
    if clip(obs.cover.distance, 2, 5) == 5 and max(t.hp, w.hp, 10) > min(obs.me.hp, 50):
        return RANGED
    if sqrt(obs.me.x) + sin(obs.me.z) * cos(obs.me.x) > atan2(obs.bot.z - obs.me.z, obs.bot.x - obs.me.x):
        return MOVE_TO_BOT
    p = point(ARENA_SIZE / 2, ARENA_SIZE / 2)
    return RETREAT if distance(obs.me, p) < 8 else MELEE
"""

TAGS_AND_ROLES = """
def role(i):
    return i % 3

def policy(obs):
    r = role(obs.index)
    if obs.tag == 3:
        return RETREAT
    if r == 0:
        return MELEE if obs.bot.can_attack else MOVE_TO_BOT
    elif r == 1:
        return RANGED if obs.bot.distance < ORB_RANGE else MOVE_TO_BOT
    else:
        return STRAFE_RIGHT if obs.cover.distance > 2 else STRAFE_LEFT
"""

DIFFERENTIAL = {
    "traced_control_flow": TRACED_CONTROL_FLOW,
    "return_in_loop": RETURN_IN_LOOP,
    "arithmetic": ARITHMETIC,
    "helpers_and_logic": HELPERS_AND_LOGIC,
    "tags_and_roles": TAGS_AND_ROLES,
    "focus_fire": FOCUS_FIRE,
}


def _python_namespace(state):
    """The language's names as plain Python: what `exec` of a test program sees."""

    def xz_dist(a, b):
        return math.hypot(b.x - a.x, b.z - a.z)

    def alive_units(units):
        return [u for u in units if u.alive]

    def pick(units, score):
        living = [u for u in units if u.alive]
        return min(living, key=score) if living else units[0]  # min keeps the first of equals

    ns = {name: code for name, (code, _) in ACTIONS.items()}
    ns.update({name: value for name, (value, _) in CONSTANTS.items()})
    ns.update(
        distance=xz_dist,
        bearing=lambda a, b: math.atan2(b.z - a.z, b.x - a.x),
        angle_diff=lambda a, b: (a - b + math.pi) % (2 * math.pi) - math.pi,
        in_range=lambda a, b, r: xz_dist(a, b) <= r,
        can_attack=lambda: state["obs"].bot.can_attack,
        point=lambda x, z: types.SimpleNamespace(x=x, z=z),
        nearest=lambda units, p=None: pick(units, lambda u: xz_dist(p or state["obs"].me, u)),
        weakest=lambda units: pick(units, lambda u: u.hp),
        count_alive=lambda units: len(alive_units(units)),
        centroid=lambda units: (
            types.SimpleNamespace(
                x=sum(u.x for u in alive_units(units)) / len(alive_units(units)),
                z=sum(u.z for u in alive_units(units)) / len(alive_units(units)),
            )
            if alive_units(units)
            else state["obs"].me
        ),
        clip=lambda x, lo, hi: min(max(x, lo), hi),
        sqrt=math.sqrt,
        sin=math.sin,
        cos=math.cos,
        atan2=math.atan2,
        radians=math.radians,
    )
    return ns


def _python_obs(rows, i):
    """NPC i's observation as plain floats, denormalised as docs/coder.md says."""
    r = [float(v) for v in rows[i]]
    ns = types.SimpleNamespace
    me = ns(x=r[0] * 30, z=r[1] * 30, hp=r[2] * 60, alive=r[2] > 0)

    def dist(x, z):
        return math.hypot(x - me.x, z - me.z)

    d_bot = r[6] * 30 * math.sqrt(2)
    bot = ns(x=r[3] * 30, z=r[4] * 30, hp=r[5] * 300, distance=d_bot, can_attack=r[7] > 0.5, alive=r[5] > 0)
    cover = ns(x=r[8] * 30, z=r[9] * 30, distance=dist(r[8] * 30, r[9] * 30))
    allies = []
    for j in range(4):
        x, z, hp = r[10 + 3 * j] * 30, r[11 + 3 * j] * 30, r[12 + 3 * j]
        allies.append(ns(x=x, z=z, hp=hp * 60, alive=hp > 0, index=j if j < i else j + 1, distance=dist(x, z)))
    return ns(index=i, tag=round(r[22] * 3), me=me, bot=bot, cover=cover, allies=allies)


def run_in_python(source, obs):
    state = {}
    ns = _python_namespace(state)
    exec(compile(source, "<test program>", "exec"), ns)  # test-owned programs only
    out = np.zeros(obs.shape[:-1], np.int32)
    for b in range(obs.shape[0]):
        rows = np.asarray(obs[b], np.float64)
        for i in range(5):
            state["obs"] = _python_obs(rows, i)
            out[b, i] = ns["policy"](state["obs"])
    return out


@pytest.mark.parametrize("name", sorted(DIFFERENTIAL))
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_programs_agree_with_python_semantics(name):
    source = DIFFERENTIAL[name]
    obs = random_obs(jax.random.key(11), (300,))
    obs = obs.at[..., 22].set(jax.random.randint(jax.random.key(12), (300, 5), 0, 4) / 3.0)
    obs = jnp.concatenate([obs, rollout_obs(2).reshape(-1, 5, 23)[::10]])
    got = np.asarray(jax.jit(translate(source))(None, obs, jax.random.key(0)))
    want = run_in_python(source, obs)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) >= 2, "the test observations must exercise more than one path"


def test_and_or_give_true_false_not_an_operand():
    # Python's `hp or 5` would be hp itself; the language documents true/false (a deliberate difference).
    policy = translate("""
def policy(obs):
    v = obs.me.hp or 5
    return MELEE if v == 1 else RETREAT
""")
    obs = jnp.zeros((5, 23)).at[:, 2].set(jnp.array([0.0, 0.5, 1.0, 0.0, 0.25]))
    np.testing.assert_array_equal(policy(None, obs, None), [MELEE] * 5)


def test_static_conditions_fold_and_traced_division_by_zero_is_inf():
    policy = translate("""
def policy(obs):
    k = 0
    for i in range(5):
        if i == 3:
            k = k + 10
    z = obs.me.hp * 0
    if k == 10 and obs.bot.x / z > 1000000:
        return RANGED
    return MELEE
""")
    obs = jnp.full((5, 23), 0.5)
    np.testing.assert_array_equal(policy(None, obs, None), [RANGED] * 5)


# -- translation errors, with kind and line


def _error(source):
    with pytest.raises(ProgramError) as info:
        translate(source)
    return info.value


@pytest.mark.parametrize(
    "source,kind,line,pattern",
    [
        ("def policy(obs):\n    return obs.bot.distance\n", "type", 2, "must return an action.*got a number"),
        ("def policy(obs):\n    return obs.me\n", "type", 2, "must return an action.*record obs.me"),
        ("def policy(obs):\n    if obs.me.hp > 3:\n        return MELEE\n", "type", 2, "without returning an action"),
        ("def policy(obs):\n    x = 1\n", "type", 2, "without returning"),
        (
            "def policy(obs):\n    if obs.me.hp > 3:\n        a = MELEE\n    return a\n",
            "name",
            4,
            "may be unassigned here: the if on line 2",
        ),
        ("def policy(obs):\n    return b\n    b = MELEE\n", "name", 2, "used before it is assigned"),
        (
            "def policy(obs):\n    a = 1 if obs.me.hp > 3 else MELEE\n    return MELEE\n",
            "type",
            2,
            "different types: a number and an action",
        ),
        (
            "def policy(obs):\n    a = 1\n    if obs.me.hp > 3:\n        a = MELEE\n    return MELEE\n",
            "type",
            3,
            "variable a",
        ),
        ("def policy(obs):\n    for i in range(obs.index):\n        pass\n    return MELEE\n", "type", 2, "range"),
        ("def policy(obs):\n    for i in range(65):\n        pass\n    return MELEE\n", "limit", 2, "at most 64"),
        ("def policy(obs):\n    a = obs.allies[4]\n    return MELEE\n", "type", 2, "out of range"),
        ("def policy(obs):\n    a = obs.allies[obs.index]\n    return MELEE\n", "type", 2, "constant whole number"),
        ("def policy(obs):\n    return MELEE + 1\n", "type", 2, "must be a number, got an action"),
        ("def policy(obs):\n    return MELEE if MELEE < RANGED else RANGED\n", "type", 2, "only be compared with =="),
        ("def policy(obs):\n    x = obs.me.distance\n    return MELEE\n", "name", 2, "obs.me has no field .distance"),
        ("def policy(obs):\n    x = obs.x\n    return MELEE\n", "name", 2, "obs has no field .x"),
        ("def policy(obs):\n    x = distance(obs.me, 3)\n    return MELEE\n", "type", 2, "second argument must be"),
        ("def policy(obs):\n    x = nearest(obs.me)\n    return MELEE\n", "type", 2, "list of units"),
        ("def policy(obs):\n    x = 1 / 0\n    return MELEE\n", "runtime", 2, "division by zero"),
        ("def policy(obs):\n    for a in obs.me:\n        pass\n    return MELEE\n", "type", 2, "for loops go over"),
        ("A = random()\ndef policy(obs):\n    return MELEE\n", "type", 1, "must be a constant number"),
        (
            "def f(x):\n    if x > 1:\n        return 1\n    return MELEE\ndef policy(obs):\n    return f(obs.me.hp)\n",
            "type",
            4,
            "the returns give different types",
        ),
        (
            "def policy(obs):\n    s = 0\n    for i in range(64):\n        for j in range(64):\n"
            "            s = s + nearest(obs.allies).hp\n    return MELEE\n",
            "limit",
            5,
            "grows past",
        ),
    ],
)
def test_translation_errors_name_kind_and_line(source, kind, line, pattern):
    err = _error(source)
    assert err.kind == kind, str(err)
    assert err.line == line, str(err)
    assert err.source_line == source.splitlines()[line - 1].strip()
    assert str(err).startswith(f"line {line}: {kind}: ")
    assert re.search(pattern, err.message), err.message


def test_the_translated_operation_count_is_limited():
    # Under the node budget but over the op budget: 64 x 12 angle_diffs of traced values.
    body = "\n".join(f"        s = s + angle_diff(s, obs.me.x + {k})" for k in range(12))
    err = _error(f"def policy(obs):\n    s = 0\n    for i in range(64):\n{body}\n    return MELEE\n")
    assert err.kind == "limit", str(err)
    assert f"the limit is {limits.MAX_OPS:,}" in err.message
