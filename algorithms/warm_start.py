"""Warm starts across observation variants: a policy's weights as the first weights of a wider network.

Each registered arena's observation extends the previous one's (`Arena-v0`'s
23 floats, then the bot's facing, then the formation slots), and the
network appends the tag one-hot after the observation. So a policy trained
on a narrower observation can seed a wider network exactly: its input rows
go where the same inputs sit now, the new inputs get zero weights, and the
widened network computes the same function as the source until training
moves the new weights. Recipe B starts from the shipped A this way, keeping
A's fighting (A beats the evasive bot; B trained from scratch lagged it);
`as_experts` seeds every expert of a per-tag network from one policy, and
`keep_fresh_experts` lets chosen experts start over.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.cli_errors import UserError
from jaxarena.names import NUM_TAGS
from jaxarena.observe import TAG as TAG_INDEX

from .config import PPOConfig
from .networks import expert_mask


def input_rows(src_obs: int, src_one_hot: bool, dst_obs: int, dst_one_hot: bool) -> np.ndarray:
    """Where each source input lands in the destination input: (src_inputs,) indices.

    Raises ValueError when the source reads something the destination does
    not (a wider observation, or the tag one-hot the destination lacks).
    """
    if src_obs > dst_obs:
        raise ValueError(f"cannot warm start a {dst_obs}-float observation from a {src_obs}-float one")
    if src_one_hot and not dst_one_hot:
        raise ValueError("the source network reads the tag one-hot; the destination does not")
    rows = list(range(src_obs))
    if src_one_hot:
        rows += list(range(dst_obs, dst_obs + NUM_TAGS))
    return np.asarray(rows)


def widen_params(src_params, dst_template, rows: np.ndarray):
    """`dst_template`'s tree filled from `src_params`: equal shapes copied, input kernels scattered into zeros.

    An input kernel is a leaf whose source shape is (len(rows), width) and
    destination shape (wider, width). Any other shape mismatch is an error.
    """

    def fill(path, src, dst):
        if src.shape == dst.shape:  # a copy: experts seeded from one source must not share buffers
            return jnp.array(src, dst.dtype, copy=True)
        if src.ndim == 2 and src.shape == (len(rows), dst.shape[1]) and dst.shape[0] > len(rows):
            return jnp.zeros(dst.shape, dst.dtype).at[rows].set(src)
        name = jax.tree_util.keystr(path)
        raise ValueError(f"cannot warm start {name}: source shape {src.shape}, destination {dst.shape}")

    return jax.tree_util.tree_map_with_path(fill, src_params, dst_template)


def forget_tag_input(src_params):
    """Zero the first layers' weights on the tag slot (obs[22]): for a source that never saw a tag.

    Combination A always sees tag 0, so those weights are their random
    initialisation, which would turn a tag into an arbitrary bias.
    """

    def zero(path, x):
        first_layer = jax.tree_util.keystr(path).endswith("layers_0']['kernel']")
        return x.at[TAG_INDEX].set(0.0) if first_layer else x

    return jax.tree_util.tree_map_with_path(zero, src_params)


def as_experts(src_params, num_experts: int = NUM_TAGS):
    """A single actor-critic's params copied into every expert of an `ActorCritic(tag_experts=True)`.

    Each expert then starts as the source policy; their weights part as
    training pays each tag for its own intent.
    """
    p = src_params["params"]
    out = {}
    for k in range(num_experts):
        for head in ("actor", "critic"):
            for i in range(2):
                out[f"expert_{head}_layers_{2 * k + i}"] = p[f"{head}_layers_{i}"]
            out[f"expert_{head}_out_{k}"] = p[f"{head}_out"]
    return {"params": out}


def keep_fresh_experts(warm_params, fresh_params, tags):
    """`warm_params` with the experts of `tags` put back to their fresh initialisation (`fresh_params`).

    For retraining one tag's expert whose warm start has settled on another
    intent: raid's Retreat expert, warm-started, fought back when caught and
    kept its far share below Surround's under every pay we tried; a fresh one
    learned to scatter (docs/training.md, "The per-tag expert squads").
    """
    mask = expert_mask(warm_params, tags)
    return jax.tree.map(lambda is_fresh, warm, fresh: fresh if is_fresh else warm, mask, warm_params, fresh_params)


def warm_start_runner(config: PPOConfig, runner, mesh=None):
    """`runner` with the params of `config.init_from` carried over (widened to this run's inputs).

    `mesh`: a multi-process run's, whose params are read on the host and put back replicated over it.
    """
    from . import distributed
    from .checkpoint import load_params, obs_size_of

    src_config, src_params = load_params(config.init_from)
    fresh = runner.train_state.params if mesh is None else distributed.host(runner.train_state.params)
    src_net, dst_net = src_config.network_kwargs(), config.network_kwargs()
    # A squad with memory seeds only the same memory: its layers are not the MLP's, nor another GRU's.
    if (src_net["hidden"], src_net["activation"], src_net.get("memory")) != (
        dst_net["hidden"],
        dst_net["activation"],
        dst_net.get("memory"),
    ) or (src_net.get("tag_experts") and not dst_net.get("tag_experts")):
        raise UserError(f"--init-from {config.init_from}: network {src_net} differs from this run's {dst_net}")
    try:
        rows = input_rows(
            obs_size_of(src_config),
            src_net["tag_one_hot"],
            obs_size_of(config),
            dst_net["tag_one_hot"],
        )
        if src_config.combination == "A":
            src_params = forget_tag_input(src_params)
        if dst_net.get("tag_experts") and not src_net.get("tag_experts"):
            src_params = as_experts(src_params)
        params = widen_params(src_params, fresh, rows)
        params = keep_fresh_experts(params, fresh, config.fresh_tags)
    except ValueError as exc:
        raise UserError(
            f"--init-from {config.init_from} ({src_config.env_id}, {src_net}) cannot seed this run "
            f"({config.env_id}, {dst_net}): {exc}"
        ) from None
    if mesh is not None:
        params = distributed.replicated(params, mesh)
    return runner.replace(train_state=runner.train_state.replace(params=params))
