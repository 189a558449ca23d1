"""jaxarena: the paper's 5-vs-1 NPC combat arena as pure, vectorised JAX.

env, params = jaxarena.make("Arena-v0", bot="balanced")
obs, state = env.reset(key, params)
obs, state, reward, done, info = env.step(key, state, actions, params)
"""

from .env import Arena
from .observe import LLM_FEATURES, llm_features, observe
from .registry import REGISTERED_IDS, bot_index, make, make_jaxmarl
from .types import (
    ACTIONS,
    BOT_TYPES,
    NUM_ACTIONS,
    NUM_NPCS,
    NUM_TAGS,
    OBS_SIZE,
    OUTCOMES,
    TAGS,
    EnvParams,
    EnvState,
)

__version__ = "0.1.0"

__all__ = [
    "ACTIONS",
    "BOT_TYPES",
    "LLM_FEATURES",
    "NUM_ACTIONS",
    "NUM_NPCS",
    "NUM_TAGS",
    "OBS_SIZE",
    "OUTCOMES",
    "REGISTERED_IDS",
    "TAGS",
    "Arena",
    "EnvParams",
    "EnvState",
    "bot_index",
    "llm_features",
    "make",
    "make_jaxmarl",
    "observe",
]
