"""What each layer above the env needs installed, and one clear error when it is missing.

`pip install jaxarena` is the env alone (jax, flax, chex, numpy). Training, the LLM layer and the
evaluation protocol come with extras; a layer whose packages are missing says which extra to
install instead of failing on the first import deep inside it.
"""

from __future__ import annotations

import importlib.util

#: The extra that brings each package a layer checks for (import name -> extra).
EXTRA_OF = {
    "optax": "train",
    "distrax": "train",
    "orbax": "train",
    "scipy": "eval",
    "matplotlib": "eval",
    "tqdm": "eval",
    "httpx": "llm",
    "tokenizers": "llm",
    "gguf": "llm",
    "tensorboardX": "log",
    "wandb": "log",
}


def require(layer: str, *modules: str) -> None:
    """Raise ImportError naming the extras to install if any of `modules` is not installed."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        extras = sorted({EXTRA_OF.get(name, "all") for name in missing})
        spec = ",".join(extras)
        raise ImportError(
            f"{layer} needs {', '.join(missing)}, which the core install leaves out: "
            f'pip install "jaxarena[{spec}]" (or ".[{spec}]" from a checkout; ".[all]" for everything)'
        )
