"""SGLang's cutlass_mla decode (`DeploymentSpec.mla_kv_splits` "one", `epsim.cost.mla_decode`):
one CTA pair a sequence walking all its keys, never split, at the split kernel's per-SM rates."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost.flash import decode_work, kernel_us
from epsim.cost.mla import absolute, absorbed_form
from epsim.cost.mla_decode import decode_block_heads, decode_grid, mla_decode_kernel
from epsim.cost.model import CostModel
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

B200 = get_hardware("B200")
PARAMS = {"base_us": 4.0, "wave_us": 2.0, "per_split_us": 0.5, "hbm_frac": 0.8,
          "tensor_frac": 0.6}
SMS = 148


def _work(seqs: float, ctx: float, split_keys: bool):
    form = absorbed_form(512, 64, 2.0)                              # BF16 latent cache
    grid = decode_grid(decode_block_heads("B200", 128), split_keys)
    return decode_work(np.array([seqs]), np.array([seqs * ctx]), 128, 1, form.flash_head_dim,
                       SMS, kv_ratio=form.flash_kv_ratio, grid=grid)


def test_few_long_sequences_are_one_pair_each():
    """5 sequences of 8k keys: the split kernel spreads their keys over the SMs, the one-split
    kernel leaves 10 CTAs (5 pairs) walking 8k keys each: one CTA's walk at its SM's share of
    the rate, the same bytes, several times the time."""
    one, split = _work(5, 8192, False), _work(5, 8192, True)
    assert not one.splits.any() and split.splits.any()
    assert one.waves[0] == 1 and one.mem_kb[0] == pytest.approx(split.mem_kb[0])
    form = absorbed_form(512, 64, 2.0)
    # the busiest CTA's 64 rows x 8192 keys, times the SMs (its time at the GPU's whole rate)
    assert one.mflops[0] == pytest.approx(8192 * 64 * form.flash_head_dim * 4.0 * SMS * 1e-6)
    params = absolute(PARAMS, B200, "bf16")
    assert kernel_us(one, params)[0] > 3 * kernel_us(split, params)[0]


def test_full_gpu_is_the_same_kernel():
    """Where the pairs already fill the SMs the split kernel does not split either: equal."""
    one, split = _work(128, 2048, False), _work(128, 2048, True)
    assert not split.splits.any()
    np.testing.assert_allclose(one.mflops, split.mflops)
    np.testing.assert_allclose(one.waves, split.waves)


def test_deployment_flag_reaches_the_kernel():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = {s: CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="B200", num_nodes=2),
                               DeploymentSpec(ep_size=16, moe_a2a_backend="deepep",
                                              enable_dp_attention=True, mla_kv_splits=s))
                  for s in ("split", "one")}
    mlas = {s: m.params.attention.mla for s, m in models.items()}
    assert mlas["one"].one_kv_split and not mlas["split"].one_kv_split
    seqs, ctx = np.array([4.0]), np.array([4.0 * 8192])
    us = {s: mla_decode_kernel(mla).us(seqs, ctx)[0] for s, mla in mlas.items()}
    assert us["one"] > 2 * us["split"]
