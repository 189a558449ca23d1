"""The policies a protocol run plays: from a spec ("A", a run directory, "scripted:...") to a function.

Every policy has the repository's one signature, `policy(params, obs, key) ->
actions`; the scripted squads (`jaxarena.policies.SCRIPTED`) and the white-box
baselines ("coder:NAME", `jaxarena.coder.language.BASELINES`) ignore `params`
(None). Specs resolve through the zoo (`jaxarena.zoo.load`), the one place that
knows them; `resolve_policy` keeps the tuple its callers take apart. A policy may
carry the arena variant it was trained on as `policy.env_id`; `policy_env_id`
reads it, with "Arena-v0" for those that do not (the scripted squads), and the
shaping it trained on, which `policy_shaping` reads. Both also take a `zoo.Policy`.
"""

from __future__ import annotations

from collections.abc import Callable

from jaxarena.zoo import Policy, env_id_of, load, shaping_of

__all__ = ["policy_env_id", "policy_shaping", "resolve_policy"]


def resolve_policy(spec: str, greedy: bool = False) -> tuple[Callable, object, str, str]:
    """(policy, params, checksum, source) for a policy spec; see `ProtocolConfig` and `jaxarena.zoo.load`.

    The checksum is the sha256 of the checkpoint directory (every file's
    relative path and bytes, in sorted order, the card left out), so a report names exactly which
    weights produced it; a scripted policy's is the sha256 of its spec.
    """
    policy = load(spec, greedy=greedy)
    return policy.fn, policy.params, policy.checksum, policy.source


def policy_env_id(policy: Callable | Policy) -> str:
    """The arena variant a policy plays on: its `env_id`, else "Arena-v0"."""
    return policy.env_id if isinstance(policy, Policy) else env_id_of(policy)


def policy_shaping(policy: Callable | Policy) -> dict:
    """The `jaxarena.make` overrides that log the return a tag-playing policy trained on: its recipe's
    shaping at its weight (`policy.recipe`, `policy.shaping_weight`), else Table 5's at weight 1."""
    return policy.shaping if isinstance(policy, Policy) else shaping_of(policy)
