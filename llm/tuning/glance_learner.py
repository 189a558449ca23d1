"""Who learns in a glance run: the LLM through a LoRA adapter, or a table of logits.

The glance algorithm (`tuning.glance`) asks one thing of its learner: a
(NUM_GLANCE_CELLS, 4) array of option logits, differentiable in the learner's
parameters. Its argmax in each cell is the answer the lanes play there, and its
softmax is what the cross-entropy fits to the target. Two learners give it:

- `LlmLearner`: SmolLM2-135M's option logits on the 18 glance prompts (one
  forward pass, `GlanceModel`), trained through a LoRA adapter. The recipe.
- `TableLearner`: an (18, 4) float32 table of logits, one row per glance cell,
  trained directly: the ablation that asks what the LLM adds beyond a table
  trained the same way. Its cells share nothing, and it never loads the LLM.
  It starts from a prior, which is also the reference of the target's KL
  term: `stock`, the stock LLM's answer probabilities on the 18 prompts
  recorded below (both learners start from the same answers and are pulled
  towards the same ones; only what is trained differs), or `uniform`, every
  answer alike (a tie's most likely answer is the first tag, Surround).

Both give `logits(frozen, params)`. `frozen` is what training holds fixed: the
LLM's base weights, or the table's prior. The compiled steps take it as an
argument, and `params=None` gives the reference that the KL term is taken to.
Adam moves each parameter by about the learning rate per step. At the LLM's
3e-4 a table's logits could move by 0.06 in the recipe's 200 Adam steps, less
than the stock margin in any cell. The table therefore trains at `TABLE_LR`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..glance import NUM_GLANCE_CELLS
from ..glance_model import GlanceModel
from ..lora import init_adapter

#: Who learns (`GlanceConfig.learner`).
LEARNERS = ("llm", "table")
#: Where a table learner starts, and the reference of its KL term (`GlanceConfig.table_prior`).
TABLE_PRIORS = ("stock", "uniform")
#: Adam's default learning rate per learner: the recipe's for the LLM's adapter; for the table, enough to
#: move a logit by several units in the recipe's 200 Adam steps (`TABLE_LR`).
LLM_LR = 3e-4
TABLE_LR = 0.05
DEFAULT_LR = {"llm": LLM_LR, "table": TABLE_LR}

#: The stock SmolLM2-135M's log-probabilities of the four answers (Surround, Aggressive, Flank, Retreat) to each
#: glance prompt, in the order of `glance_prompts()`, as the embedded model computes them (a slow test checks).
STOCK_LOG_PROBS = (
    (-2.4580402, -0.69290346, -1.182621, -2.2274666),
    (-2.5065389, -0.63904625, -1.2192464, -2.3517575),
    (-2.499979, -0.7277965, -1.1076126, -2.2576637),
    (-2.4893653, -0.5665462, -1.4493778, -2.1642234),
    (-2.502958, -0.5277059, -1.4939363, -2.2661245),
    (-2.5094566, -0.5763397, -1.4312477, -2.1393986),
    (-2.5543365, -0.4877473, -1.560486, -2.3206043),
    (-2.6041574, -0.4593896, -1.577609, -2.4315863),
    (-2.5493264, -0.49197245, -1.5534577, -2.3133302),
    (-2.4975014, -0.50707066, -1.4205304, -2.6054935),
    (-2.6133919, -0.45219225, -1.4969273, -2.7080631),
    (-2.5324185, -0.49171564, -1.4427731, -2.6216137),
    (-2.5592988, -0.41485527, -1.6910489, -2.5525963),
    (-2.629942, -0.36737445, -1.793932, -2.6727486),
    (-2.5633554, -0.3975001, -1.7450705, -2.572772),
    (-2.663299, -0.3644042, -1.7834716, -2.6938796),
    (-2.6460876, -0.33670038, -1.8695011, -2.801014),
    (-2.5896297, -0.36933666, -1.7972293, -2.6882186),
)


class LlmLearner:
    """The LLM answering the glance prompts, trained through a LoRA adapter (the recipe)."""

    name, noun = "llm", "the LLM"
    labels = ("stock LLM", "tuned LLM")

    def __init__(self, model: GlanceModel):
        self.model = model
        self.frozen = model.base

    def init(self, seed: int):
        return init_adapter(self.model.cfg, self.model.lora, jax.random.PRNGKey(seed))

    def logits(self, frozen, params) -> jax.Array:
        return self.model.logits(frozen, params)


class TableLearner:
    """An (NUM_GLANCE_CELLS, 4) float32 table of logits, trained directly; it starts at its prior."""

    name, noun = "table", "a table of logits"
    labels = ("prior table", "tuned table")

    def __init__(self, prior="stock"):
        logits = prior_logits(prior) if isinstance(prior, str) else np.asarray(prior, np.float32)
        if logits.shape != (NUM_GLANCE_CELLS, len(STOCK_LOG_PROBS[0])):
            raise ValueError(f"a table's prior is ({NUM_GLANCE_CELLS}, 4) logits, got {logits.shape}")
        self.prior = prior if isinstance(prior, str) else "given"
        self.frozen = jnp.asarray(logits, jnp.float32)

    def init(self, seed: int):
        del seed  # the table starts at its prior, whatever the seed; the seed picks the training spawns
        return jnp.array(self.frozen)

    def logits(self, frozen, params) -> jax.Array:
        return frozen if params is None else params


def prior_logits(name: str) -> np.ndarray:
    """(NUM_GLANCE_CELLS, 4) float32: the stock LLM's log-probabilities, or zeros (every answer alike)."""
    if name == "stock":
        return np.asarray(STOCK_LOG_PROBS, np.float32)
    if name == "uniform":
        return np.zeros((NUM_GLANCE_CELLS, len(STOCK_LOG_PROBS[0])), np.float32)
    raise ValueError(f"a table's prior is one of {', '.join(TABLE_PRIORS)}; got {name!r}")


def as_learner(model, config=None):
    """The learner of a glance run: a learner as given, the LLM for a `GlanceModel`, a fresh table for None.

    With `config`, refuse a learner other than the one it names.
    """
    if isinstance(model, (LlmLearner, TableLearner)):
        learner = model
    elif isinstance(model, GlanceModel):
        learner = LlmLearner(model)
    elif model is None and config is not None and config.learner == "table":
        learner = TableLearner(config.table_prior)
    else:
        raise ValueError("a glance run's learner is the LLM (give its GlanceModel) or a table (--learner table)")
    if config is not None and learner.name != config.learner:
        raise ValueError(f"the run's config names the {config.learner} learner, but the {learner.name} one was given")
    if config is not None and learner.name == "table" and learner.prior not in (config.table_prior, "given"):
        raise ValueError(f"the run's config names the {config.table_prior} prior, the table has the {learner.prior}")
    return learner
