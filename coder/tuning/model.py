"""The coder's LLM as a function of a LoRA adapter that acts after the shared system prompt.

The coder's system prompt (the task and the language reference) is about
2.6 k tokens and the same for every reply; the tactics and the reply are a
few hundred. Training through the whole prompt would cost about ten times
more per sample, so the adapter acts only *after* the shared prefix:

- the prefix's KV cache comes from the base model, once (`GGUFGenerator.prefix_cache`);
- the suffix (the user turn, the assistant opening and the reply) runs with
  the adapter attached, attending to that cache;
- generation does the same: an adapter whose card says `acts_on:
  after-prefix` makes `GGUFGenerator` build its prefix cache from the base
  weights (`GGUFGenerator.use_adapter`), so what is trained is what plays.

`_reply_log_probs` (`CoderModel.log_probs`) is the one differentiable computation:
the log-probability of each reply token under the adapter, from one forward pass
over the padded suffixes. SFT maximises it on reference programs; GRPO takes it
under the sampler that drew its replies and weights it by each reply's
group-relative reward (`train`).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.llm import lora as L
from jaxarena.llm import model as M
from jaxarena.llm.generate import GGUFGenerator
from jaxarena.llm.programs import nucleus_keep

#: Suffix lengths the training programs are compiled for (a longer reply is refused, not cut).
SUFFIX_BUCKETS = (256, 384, 512, 768)


@dataclasses.dataclass(frozen=True)
class Batch:
    """Right-padded suffixes: tokens (B, S); the next token at each position; which targets are reply tokens."""

    tokens: np.ndarray
    targets: np.ndarray
    valid: np.ndarray
    reply: np.ndarray


class CoderModel:
    """The coder's base model (the embedded SmolLM2 or a GGUF) and one system prompt, tuned after that prompt.

    Args:
      generator: a `GGUFGenerator` running the base model (no adapter).
      system: the coder's system prompt; every example and reply shares it.
    """

    def __init__(self, generator: GGUFGenerator, system: str):
        if generator.params is not generator.base_params:
            raise ValueError("CoderModel needs the base model's generator: it must run without an adapter")
        self.generator = generator
        self.cfg = generator.cfg
        self.tokenizer = generator.tokenizer
        self.system = system
        self.base = generator.base_params
        self.prefix_ids = tuple(generator.tokenizer.encode(generator.tokenizer.prefix(system)))
        self.prefix = generator.prefix_cache(self.prefix_ids)
        self._log_probs = jax.jit(
            partial(_reply_log_probs, self.cfg), static_argnames=("lora", "with_logits", "temperature", "sampler")
        )

    def suffix_ids(self, user: str) -> list[int]:
        """The prompt's token ids after the shared prefix (the user turn and the assistant opening)."""
        ids = self.tokenizer.encode(self.tokenizer.render(self.system, user))
        n = self.generator.split_prefix(self.system, ids)
        if tuple(ids[:n]) != self.prefix_ids:
            raise ValueError("the prompt does not start with the coder's system prefix")
        return ids[n:]

    def batch(self, pairs: list[tuple[str, str | list[int]]], *, append_end: bool = True) -> Batch:
        """(user, reply) pairs → a padded batch; a reply is text or token ids.

        With `append_end` the reply's targets end with the end-of-turn token,
        so the model learns to stop (GRPO passes sampled ids, which already
        end as they ended). A pair longer than the largest bucket raises.
        """
        end = [self.tokenizer.end_of_turn_id] if append_end else []
        rows = []
        for user, reply in pairs:
            prompt = self.suffix_ids(user)
            reply_ids = list(reply) if not isinstance(reply, str) else self.tokenizer.encode(reply)
            rows.append((prompt, reply_ids + end))
        longest = max(len(p) + len(r) for p, r in rows)
        S = next((b for b in SUFFIX_BUCKETS if b >= longest), None)
        if S is None:
            raise ValueError(f"a prompt and reply of {longest} tokens exceed the largest bucket {SUFFIX_BUCKETS[-1]}")
        B = len(rows)
        tokens, targets = np.zeros((B, S), np.int32), np.zeros((B, S), np.int32)
        valid, reply = np.zeros((B, S), bool), np.zeros((B, S), bool)
        for b, (p, r) in enumerate(rows):
            seq = p + r
            tokens[b, : len(seq)] = seq
            valid[b, : len(seq)] = True
            # Position t predicts token t + 1: the reply's tokens are predicted from len(p) - 1 on.
            targets[b, : len(seq) - 1] = seq[1:]
            reply[b, len(p) - 1 : len(seq) - 1] = True
        return Batch(tokens, targets, valid, reply)

    def prefix_arrays(self) -> tuple:
        """(k, v, valid, length) of the shared prefix's base-model cache, as the jitted losses take it."""
        return (self.prefix.k, self.prefix.v, self.prefix.valid, np.int32(self.prefix.length))

    def log_probs(self, adapter, lora: L.LoraConfig | None, batch: Batch, *, with_logits: bool = False):
        """(B, S) log-probability of each target under `adapter` (None: the base model); 0 off the reply."""
        return self._log_probs(self.base, adapter, *self.prefix_arrays(), batch, lora=lora, with_logits=with_logits)


def _reply_log_probs(
    cfg,
    base,
    adapter,
    pk,
    pv,
    p_valid,
    p_len,
    batch: Batch,
    *,
    lora,
    with_logits=False,
    remat=False,
    temperature=1.0,
    sampler=None,
):
    """Differentiable in `adapter`: the target tokens' log-probs (B, S), masked to the reply.

    `sampler` (top_k, top_p): the targets were drawn by the generator's sampler, so their
    log-probs are taken under its distribution (`sampled_log_probs`), not the full softmax.
    With `with_logits`, also the (B, S, V) log-softmax, for the exact KL to a reference. `remat`
    recomputes each block in the backward pass instead of keeping its activations: 1.3-1.4x
    slower, and not needed since the attention keeps only its probabilities (a batch of two
    peaks at 8.0 GB; `benchmarks/coder_tuning.py` measures both ways).
    """
    params = L.attach(base, adapter, lora) if adapter is not None else base
    tokens = jnp.asarray(batch.tokens)
    B, S = tokens.shape
    positions = p_len + jnp.broadcast_to(jnp.arange(S), (B, S))
    causal = jnp.tril(jnp.ones((S, S), bool))
    o_mask = causal[None] & jnp.asarray(batch.valid)[:, None, :]
    x, _, _ = M.layers_forward(cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask, remat=remat)
    # At a sampling temperature T the policy that wrote a reply is softmax(logits / T), truncated as the
    # sampler truncates it (`sampler`): GRPO's gradient is on-policy only for that distribution.
    scaled = M.lm_head(cfg, params, x) / temperature
    logp = jax.nn.log_softmax(scaled, axis=-1)
    targets = jnp.asarray(batch.targets)
    if sampler is None:
        target_lp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    else:
        target_lp = sampled_log_probs(scaled, targets, *sampler)
    target_lp = jnp.where(jnp.asarray(batch.reply), target_lp, 0.0)
    return (target_lp, logp) if with_logits else target_lp


def sampled_log_probs(scaled: jax.Array, targets: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """log-probs of `targets` under the generator's sampler (`llm.programs.sample_token`'s rule).

    That sampler keeps the top_k of the temperature-scaled logits, then the smallest
    set of those whose probability reaches top_p, and draws from them renormalised. A
    policy gradient on its replies is on-policy only under that distribution: the full
    softmax would count mass no reply could come from. The kept set is held fixed in
    the gradient (as the draw did). A target outside the set keeps a finite log-prob:
    a rounding difference between generation and this forward at the set's edge can
    put a drawn token just outside it.
    """
    vals = jax.lax.top_k(scaled, top_k)[0]  # (..., k), descending
    probs = jax.nn.softmax(vals, axis=-1)
    keep = jax.lax.stop_gradient(nucleus_keep(probs, top_p))
    kept_mass = jax.nn.logsumexp(jnp.where(keep, vals, -jnp.inf), axis=-1)
    return jnp.take_along_axis(scaled, targets[..., None], axis=-1)[..., 0] - kept_mass


jax.tree_util.register_dataclass(Batch, data_fields=["tokens", "targets", "valid", "reply"], meta_fields=[])
