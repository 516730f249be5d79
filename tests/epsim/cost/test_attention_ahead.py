"""Decode attention priced ahead (`epsim.cost.attention_ahead`) gives each step the bits of
pricing it alone, split-KV launches included."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.cost.flash import decode_work, kernel_us, num_splits
from epsim.cost.mla import mla_attention_us
from epsim.cost.mla_decode import mla_decode_kernel, with_partials
from epsim.cost.model import CostModel
from epsim.cost.tp import attention_collectives_us
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model


def _deepseek(**deployment) -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="H200"),
                         DeploymentSpec(**deployment))


def _alone(cm: CostModel, batch: BatchCounts) -> float:
    """`_attention_layer_us`'s MLA branch, one step by itself (what the table replaces): the
    kernel, its projections and the attention block's own ops."""
    mla = cm.params.attention.mla
    t = float(mla_attention_us(batch, mla, mla_decode_kernel(mla), cm._projections(batch)).max())
    if cm.params.tp_size > 1:
        t += attention_collectives_us(cm.params, batch, True)
    return t


def test_split_kv_steps_priced_at_once_are_the_steps_priced_alone():
    kernel = mla_decode_kernel(_deepseek(ep_size=8).params.attention.mla)
    seqs = np.array([1.0, 3.0, 0.0, 40.0])             # few sequences: launches may split
    counts = kernel.counts(seqs)
    assert counts.may_split
    contexts = seqs * np.arange(1, 30000, 997, dtype=np.float64)[:, None]      # [steps, dp]
    block = kernel.us(seqs, contexts)
    rows = np.stack([kernel.us(seqs, c) for c in contexts])
    assert np.array_equal(block, rows)
    # ... over steps where some ranks split their keys and others do not
    work = decode_work(seqs, contexts, kernel.heads, kernel.kv_heads, kernel.head_dim,
                       kernel.num_sms, counts, kernel.kv_ratio, kernel.grid)
    assert (work.splits > 0).any() and (work.splits[:, :2] == 0).any()
    # (with its split partial outputs' bytes, `with_partials`)
    assert np.array_equal(kernel_us(with_partials(work, counts.seqs, kernel.heads, kernel.form),
                                    kernel.params), block)
    assert num_splits.cache_info().currsize > 0


def test_steady_steps_served_from_the_table_match_pricing_each_alone():
    # DP attention over 8 ranks; attention TP 8 (its collectives added to each step)
    for deployment, dp in (({"ep_size": 8, "moe_a2a_backend": "deepep",
                             "enable_dp_attention": True}, 8),
                           ({"ep_size": 1, "tp_size": 8, "moe_a2a_backend": "none",
                             "enable_dp_attention": False}, 1)):
        cm = _deepseek(**deployment)
        assert cm.params.tp_size == 9 - dp
        start = BatchCounts.uniform_decode(dp, 3, 2000)
        other = BatchCounts.uniform_decode(start.tokens.shape[0], 4, 2500)
        steps = []
        for batch in (start, other, start):        # steady runs, a change, and back
            for i in range(40):
                steps.append(replace(batch, decode_context=batch.decode_context
                                     + i * batch.decode_tokens))
        steps += [steps[5], steps[3]]              # off the table: priced anew
        ahead = [cm._attention_layer_us(b) for b in steps]
        assert ahead == [_alone(cm, b) for b in steps]
        assert cm._ahead.num_tables < len(steps) // 4     # most steps came from a table
