"""The attention's hand-written backward equals autodiff of the plain computation, prefix included."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.llm import attention as M

B, T, H, KV, D = 2, 5, 6, 2, 8


def _inputs(dtype, key=0, P=7):
    k = jax.random.split(jax.random.key(key), 6)
    q = jax.random.normal(k[0], (B, T, H, D), dtype)
    pk, pv = (jax.random.normal(k[i], (P, KV, D), dtype) for i in (1, 2))
    ok, ov = (jax.random.normal(k[i], (B, T, KV, D), dtype) for i in (3, 4))
    # Causal own block; prefix slot 3 is padding, and so is the second row's first own slot.
    # (A query that may see no key at all gets the softmax's gradient here, where a `where`
    # would give zero; no caller reads such a row, so `_grads` gives it no cotangent.)
    p_valid = jnp.arange(P) != 3  # (with P = 0, no prefix: the tag model's training recomputes it)
    o_mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
    o_mask = o_mask.at[1, :, 0].set(False)
    bias = M.attention_bias(p_valid, o_mask, H // KV)
    return q, pk, pv, ok, ov, bias, jax.random.normal(k[5], (B, T, H, D), jnp.float32)


def _reference(q, pk, pv, ok, ov, bias):
    """The same attention written plainly (where-masked float32 softmax), differentiated by JAX."""
    G, P = H // KV, pk.shape[0]
    k = jnp.concatenate([jnp.broadcast_to(pk[None], (B,) + pk.shape), ok], axis=1)
    v = jnp.concatenate([jnp.broadcast_to(pv[None], (B,) + pv.shape), ov], axis=1)
    k, v = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)  # query head h reads KV head h // G
    s = jnp.einsum("bthd,bshd->bhts", q, k, preferred_element_type=jnp.float32) * D**-0.5
    allowed = bias.reshape(B, T, G, P + T)  # rows are (t, g) for KV head 0; same for every KV head
    allowed = jnp.tile(allowed.transpose(0, 2, 1, 3), (1, KV, 1, 1)) == 0.0
    s = jnp.where(allowed, s, M._NEG)
    p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
    return jnp.einsum("bhts,bshd->bthd", p, v, preferred_element_type=jnp.float32).astype(q.dtype)


def _grads(fn, inputs):
    q, pk, pv, ok, ov, bias, w = inputs
    # A query that may see no key (left padding with no prefix) gets no cotangent in real use: nothing reads it.
    sees_a_key = (bias == 0.0).any(-1).reshape(B, T, H // KV)[..., 0]
    w = w * sees_a_key[:, :, None, None]

    def loss(q, pk, pv, ok, ov):
        return jnp.sum(fn(q, pk, pv, ok, ov, bias).astype(jnp.float32) * w)

    return jax.grad(loss, argnums=(0, 1, 2, 3, 4))(q, pk, pv, ok, ov)


def test_forward_equals_the_where_masked_softmax():
    inputs = _inputs(jnp.float32)
    chex.assert_trees_all_close(M.attention(*inputs[:6]), _reference(*inputs[:6]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tol,P", [(jnp.float32, 1e-4, 7), (jnp.bfloat16, 3e-2, 7), (jnp.float32, 1e-4, 0)])
def test_backward_equals_autodiff_for_queries_own_block_and_prefix(dtype, tol, P):
    inputs = _inputs(dtype, P=P)
    ours, ref = _grads(jax.jit(M.attention), inputs), _grads(_reference, inputs)
    for name, a, b in zip(("q", "prefix k", "prefix v", "own k", "own v"), ours, ref, strict=True):
        chex.assert_shape(a, b.shape)
        chex.assert_tree_all_finite(a)
        if a.size == 0:  # no prefix: nothing to compare
            continue
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        scale = np.abs(b).max()
        assert scale > 0, name
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * scale, err_msg=name)


def test_masked_keys_get_no_gradient():
    _, dpk, dpv, dok, dov = _grads(M.attention, _inputs(jnp.float32))
    # Prefix slot 3 is padding for every row; own slot 0 of row 1 is left padding.
    assert float(jnp.abs(dpk[3]).max()) == 0.0 and float(jnp.abs(dpv[3]).max()) == 0.0
    assert float(jnp.abs(dok[1, 0]).max()) == 0.0 and float(jnp.abs(dov[1, 0]).max()) == 0.0


@pytest.mark.parametrize("tied", [True, False])
def test_output_head_backward_equals_autodiff_of_the_plain_product(tied):
    """The output head's own backward rounds the cotangent to bf16; it must match autodiff of the plain product."""
    from jaxarena.llm import model

    V, d = 11, 8
    k = jax.random.split(jax.random.key(3), 4)
    x = jax.random.normal(k[0], (2, 3, d), jnp.bfloat16)
    w = jax.random.normal(k[1], (V, d) if tied else (d, V), jnp.bfloat16)
    params = {"final_norm": jnp.ones((d,), jnp.bfloat16), "embed" if tied else "lm_head": w}
    cfg = type("Cfg", (), {"rms_eps": 1e-5})()
    cot = jax.random.normal(k[2], (2, 3, V), jnp.float32)

    def plain(x, w):
        h = model.rms_norm(x, params["final_norm"], 1e-5)
        return h.astype(jnp.float32) @ (w.T if tied else w).astype(jnp.float32)

    def ours(x, w):
        return model.lm_head(cfg, {**params, ("embed" if tied else "lm_head"): w}, x)

    chex.assert_trees_all_close(ours(x, w), plain(x, w), rtol=1e-2, atol=1e-2)
    got = jax.grad(lambda x, w: jnp.sum(ours(x, w) * cot), argnums=(0, 1))(x, w)
    want = jax.grad(lambda x, w: jnp.sum(plain(x, w) * cot), argnums=(0, 1))(x, w)
    for a, b in zip(got, want, strict=True):
        chex.assert_shape(a, b.shape)
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=0, atol=3e-2 * np.abs(b).max())
