"""The env batch sharded over 2 (forced host) devices trains like one device.

XLA_FLAGS must be set before JAX starts, so the check runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, numpy as np
    from jaxarena.algorithms import PPOConfig, make_trainer
    assert jax.device_count() == 2, jax.devices()
    cfg = PPOConfig(combination="B", num_envs=8, num_steps=16, total_timesteps=8 * 16 * 3,
                    update_epochs=2, num_minibatches=2, hidden=16)
    out = {}
    results = {}
    for name, mesh in (("sharded", "auto"), ("single", None)):
        tr = make_trainer(cfg, mesh=mesh)
        rs = jax.jit(tr.init)(jax.random.PRNGKey(0))
        rs, m = jax.jit(tr.run_updates, static_argnums=1)(rs, 3)
        results[name] = (rs, m)
        out[name + "_mesh"] = tr.mesh is not None
        out[name + "_obs_devices"] = len(rs.obs.sharding.device_set)
    a, b = results["sharded"][0], results["single"][0]
    diffs = jax.tree.leaves(jax.tree.map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))),
                                         a.train_state.params, b.train_state.params))
    out["max_param_diff"] = max(diffs)
    out["max_param"] = max(float(np.max(np.abs(x))) for x in jax.tree.leaves(b.train_state.params))
    out["obs_equal"] = bool(np.array_equal(np.asarray(a.obs), np.asarray(b.obs)))
    out["loss_diff"] = float(np.max(np.abs(np.asarray(results["sharded"][1]["total_loss"])
                                          - np.asarray(results["single"][1]["total_loss"]))))
    print("RESULT", json.dumps(out))
    """
)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_sharded_training_matches_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [row for row in proc.stdout.splitlines() if row.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT ") :])
    assert out["sharded_mesh"] and not out["single_mesh"]
    assert out["sharded_obs_devices"] == 2  # really split over both devices
    # Same rollouts (sampling is sharding-invariant), params equal up to float reduction order.
    assert out["obs_equal"]
    assert out["max_param_diff"] < 1e-4, out
    assert out["loss_diff"] < 1e-4, out
