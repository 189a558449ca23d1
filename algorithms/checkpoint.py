"""Checkpoints with orbax: the full runner state for resuming, params for using a policy.

Layout of a run directory (what `scripts/train.py --out DIR` writes)::

    DIR/config.json                 the PPOConfig (so a checkpoint needs only its path)
    DIR/checkpoints/<update>/state  full RunnerState: params, optimiser, envs, rng, update
    DIR/checkpoints/<update>/params the policy parameters alone

orbax writes each step into a temporary directory and renames it when
complete, so a kill mid-save leaves the previous checkpoint intact.
An exported policy (`export_policy`) has the same layout with only `params`.

    policy, params = load_policy("runs/a")          # or the packaged "pretrained/A"
    actions = jax.jit(policy)(params, obs, key)     # obs (5, obs_size) or (..., obs_size)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

import jaxarena
from jaxarena.files import write_atomic

from .config import PPOConfig
from .loggers import TENSORBOARD_DIR, WANDB_ID_FILE
from .networks import ActorCritic, init_params, is_recurrent, network_of

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
#: Where the packaged policies that are kept for the record live (`pretrained/archive/NAME`).
ARCHIVE = "archive"


def write_config(run_dir: str | Path, config: PPOConfig) -> Path:
    """Write `config.json` atomically (temp file + rename)."""
    return write_atomic(Path(run_dir) / CONFIG_FILE, config.to_json())


def read_config(run_dir: str | Path) -> PPOConfig:
    return PPOConfig.from_dict(json.loads((Path(run_dir) / CONFIG_FILE).read_text()))


def _manager(run_dir: str | Path, max_to_keep: int | None = 2) -> ocp.CheckpointManager:
    directory = (Path(run_dir) / CHECKPOINT_DIR).resolve()
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    return ocp.CheckpointManager(directory, options=options)


class Checkpointer:
    """Save and restore a run's `RunnerState` under `run_dir/checkpoints`.

    Saves are synchronous (`save` returns when the step is on disk), so the
    training loop can promise that a finished chunk survives a kill.

    In a multi-process run (`jax.distributed`) every process builds its
    Checkpointer and calls `save` and `restore` with its part of the runner
    state: each array is written once, every shard by the process that holds it
    (process 0 writes the metadata), and the step is complete only when all
    have written. `run_dir` must then be on a filesystem every process sees.
    Process 0 alone writes `config.json`.
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: PPOConfig | None = None,
        max_to_keep: int | None = 2,
        save_config: bool = True,
    ):
        self.run_dir = Path(run_dir)
        self.config = config
        if save_config and jax.process_index() == 0:
            write_config(self.run_dir, config)
        self._mngr = _manager(self.run_dir, max_to_keep)

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        """The updates of every finished checkpoint, oldest first."""
        return sorted(self._mngr.all_steps())

    def save(self, state, step: int | None = None, meta: dict | None = None) -> int:
        """Save `state` under `step` (default its update count); returns that step.

        A state with a `train_state` (every PPO trainer's) also saves its params alone, which is what
        `load_params` reads; `meta` is a JSON object saved beside it (the LoRA tuners' history).
        """
        step = int(state.update) if step is None else int(step)
        items = {"state": ocp.args.StandardSave(state)}
        if hasattr(state, "train_state"):
            items["params"] = ocp.args.StandardSave(state.train_state.params)
        if meta is not None:
            items["meta"] = ocp.args.JsonSave(meta)
        self._mngr.save(step, args=ocp.args.Composite(**items), force=True)
        self._mngr.wait_until_finished()
        return step

    def delete_after(self, step: int) -> None:
        """Drops every checkpoint later than `step` (a resume that goes on from `step`)."""
        for later in [s for s in self.all_steps() if s > step]:
            self._mngr.delete(later)

    def meta(self, step: int) -> dict:
        """The JSON object saved with `step`."""
        return self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def restore(self, template, step: int | None = None):
        """Restore a RunnerState shaped (and sharded) like `template` (latest step by default)."""
        step = self._mngr.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint under {self.run_dir / CHECKPOINT_DIR}")
        restored = self._mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(template)))
        return restored["state"]

    def close(self):
        self._mngr.close()


#: Everything a training run writes into its folder (`--fresh` removes these and nothing else).
RUN_FILES = (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    "metrics.csv",
    "metrics.jsonl",
    "learning_curve.png",
    "summary.json",
    TENSORBOARD_DIR,
    WANDB_ID_FILE,
)


def clear_run(run_dir: str | Path) -> None:
    """Removes what a training run wrote into `run_dir` (`RUN_FILES`), leaving anything else there."""
    for name in RUN_FILES:
        target = Path(run_dir) / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)


def has_checkpoint(run_dir: str | Path) -> bool:
    """True if `run_dir` holds a config and at least one finished checkpoint."""
    ckpt = Path(run_dir) / CHECKPOINT_DIR
    if not (Path(run_dir) / CONFIG_FILE).exists() or not ckpt.is_dir():
        return False
    return any(p.is_dir() and p.name.isdigit() for p in ckpt.iterdir())


def export_policy(run_dir: str | Path, params, config: PPOConfig, step: int = 0) -> Path:
    """Write a policy-only checkpoint (config.json + params), e.g. for shipping."""
    write_config(run_dir, config)
    mngr = _manager(run_dir, max_to_keep=1)
    mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params)), force=True)
    mngr.wait_until_finished()
    mngr.close()
    return Path(run_dir)


def resolve_path(path: str | Path) -> Path:
    """A run directory, or a packaged name: "A", "B", "B-paper", ... (or "pretrained/A") -> the shipped policy.

    Superseded and ablation policies live under `pretrained/archive/` and load by their name alone.
    """
    p = Path(path)
    if (p / CONFIG_FILE).exists():
        return p
    name = p.name if p.parent.name in ("pretrained", ARCHIVE) or str(p.parent) == "." else None
    for root in (PRETRAINED_DIR, PRETRAINED_DIR / ARCHIVE):
        if name and (root / name / CONFIG_FILE).exists():
            return root / name
    raise FileNotFoundError(f"{path}: no {CONFIG_FILE} there, and not a packaged policy ({PRETRAINED_DIR})")


def source_name(directory: str | Path) -> str:
    """How a summary names a policy directory: "pretrained/A" (or "pretrained/archive/NAME") for a
    packaged one, which `resolve_path` loads on any machine; any other directory as given."""
    directory = Path(directory)
    try:
        return directory.resolve().relative_to(PRETRAINED_DIR.parent).as_posix()
    except ValueError:
        return str(directory)


def shipped_policies() -> dict[str, Path]:
    """{name: directory} of every packaged policy, the archived ones included."""
    found = {}
    for root in (PRETRAINED_DIR, PRETRAINED_DIR / ARCHIVE):
        for config in sorted(root.glob(f"*/{CONFIG_FILE}")):
            found.setdefault(config.parent.name, config.parent)  # as resolve_path: the top level first
    return found


def load_params(path: str | Path, step: int | None = None):
    """(config, params) from a run directory or exported policy."""
    run_dir = resolve_path(path)
    config = read_config(run_dir)
    template = init_params(network_of(config.network_kwargs()), jax.random.PRNGKey(0), obs_size_of(config))
    mngr = _manager(run_dir, max_to_keep=None)
    step = mngr.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint under {run_dir / CHECKPOINT_DIR}")
    restored = mngr.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(template)))
    mngr.close()
    return config, restored["params"]


def load_saved_params(run_dir: str | Path, step: int | None = None):
    """The parameters a training run saved (latest step by default), as the nested dicts they were saved
    from: for trainers whose network needs no config to rebuild (the RL selector)."""
    mngr = _manager(run_dir, max_to_keep=None)
    step = mngr.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint under {Path(run_dir) / CHECKPOINT_DIR}")
    restored = mngr.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore()))
    mngr.close()
    return jax.tree.map(jnp.asarray, restored["params"])


def obs_size_of(config: PPOConfig) -> int:
    """Floats per NPC observation of the arena `config` trained on."""
    return jaxarena.make(config.env_id)[0].obs_size


def make_policy(config: PPOConfig, greedy: bool = False) -> Callable:
    """`policy(params, obs, key=None) -> actions` for the network of `config`.

    obs: (..., obs_size) float32 from the env the policy was trained on,
    `policy.env_id` ("Arena-v0": 23 floats, "ArenaFacing-v0": 25), e.g. (5, obs_size)
    for one arena or (n, 5, obs_size); returns int32 actions of shape
    obs.shape[:-1]. Jittable. With `greedy` the most likely action is taken
    and `key` is ignored; otherwise `key` is required.

    A squad with memory (`PPOConfig.memory`) carries it through the call:
    `policy(params, obs, key, memory) -> (actions, memory)`, starting from
    `policy.initial_memory(obs.shape[:-1])` at an episode's start
    (`jaxarena.policies.with_memory` plays either kind the same way).
    """
    network = network_of(config.network_kwargs())
    obs_size = obs_size_of(config)

    def act(logits, key):
        if greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        if key is None:
            raise ValueError("a sampling policy needs a PRNG key (or load it with greedy=True)")
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    def checked(obs):
        if obs.shape[-1] != obs_size:
            raise ValueError(
                f"this policy reads {config.env_id}'s {obs_size}-float observation, got {obs.shape[-1]} floats; "
                f"build its env with jaxarena.make(policy.env_id)"
            )
        return jnp.asarray(obs, jnp.float32)

    def policy(params, obs, key=None):
        logits = network.apply(params, checked(obs), method=ActorCritic.logits)
        return act(logits, key)

    def policy_with_memory(params, obs, key=None, memory=None):
        if memory is None:
            raise ValueError(
                "this squad has memory: call policy(params, obs, key, memory) -> (actions, memory), "
                "starting from policy.initial_memory(obs.shape[:-1])"
            )
        memory, logits, _ = network.apply(params, memory, checked(obs))
        return act(logits, key), memory

    if is_recurrent(network):
        policy = policy_with_memory
        policy.initial_memory = network.initial_memory

    policy.env_id = config.env_id
    # The arena preset it trained on: evaluate it with jaxarena.make(policy.env_id, scenario=policy.scenario).
    policy.scenario = config.scenario
    # The shaping it trained on, so a rollout can log the return it optimised (`shaping_recipe`).
    policy.recipe = config.recipe
    policy.shaping_weight = config.effective_shaping_weight
    return policy


def load_policy(path: str | Path, greedy: bool = False, step: int | None = None):
    """Load a trained policy: `(policy, params)` with `policy(params, obs, key) -> actions`.

    `path` is a run directory (`--out` of the training script), an exported
    policy directory, or the name of a packaged policy ("A", "B", "B-paper", ...;
    docs/training.md lists them). The
    latest checkpoint is used unless `step` is given. See `make_policy`.
    """
    config, params = load_params(path, step)
    return make_policy(config, greedy), params
