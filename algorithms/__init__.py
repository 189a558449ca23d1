"""jaxarena.algorithms: PPO (PureJaxRL-style) for the shared NPC policy, networks, checkpoints."""

from jaxarena.extras import require

require("jaxarena.algorithms", "optax", "distrax", "orbax")

# ruff: noqa: E402 (the imports follow the extras check, so a core-only install gets its one clear error)
from .config import PPOConfig
from .networks import ActorCritic
from .ppo import RunnerState, make_train, make_trainer
from .ppo_core import Trainer
from .ppo_objective import calculate_gae

__all__ = ["ActorCritic", "PPOConfig", "RunnerState", "Trainer", "calculate_gae", "make_train", "make_trainer"]
