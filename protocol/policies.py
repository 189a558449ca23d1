"""The policies a protocol run plays: from a spec ("A", a run directory, "scripted:...") to a function.

Every policy has the repository's one signature, `policy(params, obs, key) ->
actions`; the scripted squads (`jaxarena.policies.SCRIPTED`) and the white-box
baselines ("coder:NAME", `jaxarena.coder.language.BASELINES`) ignore `params`
(None). A policy may carry the arena variant it was trained on as
`policy.env_id`; `policy_env_id` reads it, with "Arena-v0" for those that do
not (the scripted squads), and the shaping it trained on, which `policy_shaping` reads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

DEFAULT_ENV_ID = "Arena-v0"


def resolve_policy(spec: str, greedy: bool = False) -> tuple[Callable, object, str, str]:
    """(policy, params, checksum, source) for a policy spec; see `ProtocolConfig`.

    The checksum is the sha256 of the checkpoint directory (every file's
    relative path and bytes, in sorted order), so a report names exactly which
    weights produced it; a scripted policy's is the sha256 of its spec.
    """
    if spec.startswith("scripted:"):
        from jaxarena.policies import SCRIPTED

        name = spec.split(":", 1)[1]
        if name not in SCRIPTED:
            raise ValueError(f"unknown scripted policy {name!r}; choose from {sorted(SCRIPTED)}")
        return SCRIPTED[name], None, "sha256:" + hashlib.sha256(spec.encode()).hexdigest(), spec
    if spec.startswith("coder:"):
        return _baseline(spec.split(":", 1)[1])
    from jaxarena.algorithms.checkpoint import load_policy, resolve_path

    try:
        directory = resolve_path(spec)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"policy {spec!r} not found ({exc}). Pass a trained run directory with --policy-a/--policy-b."
        ) from None
    policy, params = load_policy(directory, greedy=greedy)
    return policy, params, "sha256:" + directory_checksum(directory), str(directory)


def _baseline(name: str) -> tuple[Callable, None, str, str]:
    """A white-box baseline translated in this process: its source ships with the package and is
    tested, so the resource-limited subprocess of `compile_program` (meant for an LLM's code) would
    only add a second JAX start-up; `translate` still applies the sandbox's checks. The checksum is
    the source's, so editing a baseline invalidates its stored cells."""
    from jaxarena.coder.language import BASELINES
    from jaxarena.coder.translate import translate

    if name not in BASELINES:
        raise ValueError(f"unknown white-box baseline {name!r}; choose from {sorted(BASELINES)}")
    source = BASELINES[name]
    checksum = "sha256:" + hashlib.sha256(source.encode()).hexdigest()
    return translate(source), None, checksum, f"coder/baselines/{name}.py"


def policy_env_id(policy: Callable) -> str:
    """The arena variant a policy plays on: its `env_id`, else "Arena-v0"."""
    return getattr(policy, "env_id", DEFAULT_ENV_ID)


def policy_shaping(policy: Callable) -> dict:
    """The `jaxarena.make` overrides that log the return a tag-playing policy trained on: its recipe's
    shaping at its weight (`policy.recipe`, `policy.shaping_weight`), else Table 5's at weight 1."""
    from jaxarena.algorithms.config import RECIPES

    recipe = getattr(policy, "recipe", "paper")
    return {"shaping_weight": getattr(policy, "shaping_weight", 1.0), "shaping_recipe": RECIPES.index(recipe)}


def directory_checksum(directory: str | os.PathLike) -> str:
    """sha256 over a directory's files (relative path + contents), in sorted order."""
    root = Path(directory)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()
