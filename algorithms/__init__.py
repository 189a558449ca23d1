"""jaxarena.algorithms: PPO (PureJaxRL-style) for the shared NPC policy, networks, checkpoints."""

from .config import PPOConfig
from .networks import ActorCritic
from .ppo import RunnerState, Trainer, calculate_gae, make_train, make_trainer

__all__ = ["ActorCritic", "PPOConfig", "RunnerState", "Trainer", "calculate_gae", "make_train", "make_trainer"]
