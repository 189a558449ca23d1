"""Check that the core package is the arena alone: `pip install jaxarena` (no extra) can make and step it.

Run with the interpreter of a fresh environment holding jaxarena installed without extras
(.ci/run does this after the main install):

    python3 -m venv /tmp/envonly && /tmp/envonly/bin/pip install -q .
    /tmp/envonly/bin/python tools/check_env_only.py

It fails unless jaxarena's own dependencies are jax, flax, chex and numpy; if a package that only
an extra brings (distrax, matplotlib, tqdm, pillow) was installed; if importing every module of
the core (`jaxarena/*.py` and `jaxarena.analysis`) and stepping the arena imports any package of
the extras; or if `Arena-v0` does not reset and step
8 vmapped arenas for 10 ticks under random actions.

optax and orbax-checkpoint (required by flax) and scipy (required by jax) are installed with
the core whatever jaxarena declares, so for them the check is that the arena never imports them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import re
import sys

CORE = {"jax", "flax", "chex", "numpy"}
# The extras' (train, eval) distributions -> their top-level module: the core path imports none.
EXTRAS_MODULES = {
    "optax": "optax",
    "distrax": "distrax",
    "orbax-checkpoint": "orbax",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "pillow": "PIL",
}
# Those no core dependency requires either, so they must not even be installed.
NOT_INSTALLED = ("distrax", "matplotlib", "tqdm", "pillow")
NUM_ENVS, NUM_STEPS = 8, 10
# Subpackages of jaxarena that belong to the core; the others (algorithms, llm, protocol, ...) need extras.
CORE_PACKAGES = ("analysis",)


def core_requirements() -> set[str]:
    """The distributions jaxarena requires without an extra (its metadata's Requires-Dist)."""
    names = set()
    for requirement in importlib.metadata.requires("jaxarena") or []:
        if "extra ==" not in requirement:
            names.add(re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower())
    return names


def installed(dists) -> list[str]:
    """Those of `dists` present in this environment."""
    present = []
    for dist in dists:
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        present.append(dist)
    return present


def import_core() -> list[str]:
    """Import every module of the core package: the top-level modules of jaxarena and `CORE_PACKAGES`."""
    import jaxarena

    names = []
    for info in pkgutil.iter_modules(jaxarena.__path__):
        if not info.ispkg:
            names.append(f"jaxarena.{info.name}")
        elif info.name in CORE_PACKAGES:
            package = importlib.import_module(f"jaxarena.{info.name}")
            names += [f"{package.__name__}.{sub.name}" for sub in pkgutil.iter_modules(package.__path__)]
    for name in names:
        importlib.import_module(name)
    return names


def step_arena() -> float:
    """Reset and step `NUM_ENVS` vmapped `Arena-v0`s for `NUM_STEPS` ticks; the summed reward."""
    import jax
    import jax.numpy as jnp

    import jaxarena

    env, params = jaxarena.make("Arena-v0")
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    key, sub = jax.random.split(jax.random.key(0))
    obs, state = reset(jax.random.split(sub, NUM_ENVS), params)
    total = jnp.zeros(())
    for _ in range(NUM_STEPS):
        key, k_act, k_step = jax.random.split(key, 3)
        actions = jax.random.randint(k_act, (NUM_ENVS, jaxarena.NUM_NPCS), 0, jaxarena.NUM_ACTIONS)
        obs, state, reward, done, _ = step(jax.random.split(k_step, NUM_ENVS), state, actions, params)
        total = total + jnp.sum(reward)
    if obs.shape != (NUM_ENVS, jaxarena.NUM_NPCS, jaxarena.OBS_SIZE):
        raise AssertionError(f"observation shape {obs.shape}")
    if done.shape != (NUM_ENVS,) or not bool(jnp.all(jnp.isfinite(obs))):
        raise AssertionError("non-finite observations or a wrong done shape")
    if int(state.t.max()) != NUM_STEPS:
        raise AssertionError(f"arenas advanced {int(state.t.max())} ticks, not {NUM_STEPS}")
    return float(total)


def layers_say_which_extra() -> list[str]:
    """The layers above the env, imported without their extras: each must fail with one ImportError naming
    the extra to install (`jaxarena.extras.require`), not deep inside on its first missing package."""
    failures = []
    for layer in ("jaxarena.algorithms", "jaxarena.protocol"):
        try:
            importlib.import_module(layer)
        except ImportError as exc:
            if "pip install" not in str(exc) or "jaxarena[" not in str(exc):
                failures.append(f"{layer} fails without naming the extra to install: {exc}")
        else:
            failures.append(f"{layer} imported without its extras")
    return failures


def main() -> int:
    failures = []
    if core_requirements() != CORE:
        failures.append(f"jaxarena requires {sorted(core_requirements())} without an extra, not {sorted(CORE)}")
    present = installed(NOT_INSTALLED)
    if present:
        failures.append(f"installed with the core but belonging to an extra: {', '.join(present)}")
    modules = import_core()
    total = step_arena()
    loaded = sorted(module for module in EXTRAS_MODULES.values() if module in sys.modules)
    if loaded:
        failures.append(f"imported by the core path: {', '.join(loaded)}")
    failures += layers_say_which_extra()
    for failure in failures:
        print(f"check_env_only: {failure}", file=sys.stderr)
    if not failures:
        print(
            f"check_env_only: {len(modules)} core modules imported; Arena-v0 ran {NUM_ENVS} arenas x {NUM_STEPS} "
            f"ticks (reward sum {total:.4f}) with jax, flax, chex and numpy alone"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
