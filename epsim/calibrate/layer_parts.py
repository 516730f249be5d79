"""The layer bench's records (`live.bench.layers`) as calibration data.

Its op-level records are fitted like any other: the kernels (`attention_decode`, `experts`,
`block_ops`, `dense_mlp`) into their components, and the `layer_part` record of the attention
block into the block's own ops (`any/attention_ops`, `epsim.cost.attention_ops`): the block less
the attention kernel measured at the same point and the projections as priced. Its whole layers
and stacks (`decoder_layer`, `layer_stack`) and the MoE block's sub-blocks are validation data
(the composition axis, `epsim.validate.composition`): `judged_only` names them, and the fit
never reads them.
"""

from __future__ import annotations

from dataclasses import replace

from epsim.calibrate.inputs import SourcedRecord
from epsim.cost.record_single import ATTENTION_KERNEL_US

WHOLE_KINDS = ("decoder_layer", "layer_stack")


def judged_only(record) -> bool:
    """A whole layer or stack, or a `layer_part` other than the attention block: never fitted."""
    if record.kind in WHOLE_KINDS:
        return True
    return record.kind == "layer_part" and record.extra.get("part") != "attention_block"


def _point(record) -> tuple:
    p = record.provenance
    return (record.model, record.num_seqs, record.context_len, record.timing,
            record.num_attention_heads, record.num_kv_heads, record.head_dim, p.device, p.commit,
            p.host, record.extra.get("pass", 0))


def pair_attention_kernels(records: list[SourcedRecord]) -> list[SourcedRecord]:
    """`records` with every attention-block `layer_part` record given the attention kernel
    measured at its point in the same run (`extra.attention_kernel_us`: the `attention_decode`
    record of the same shape, batch, context, timing and machine); one with no such kernel is
    left as it is (its fit row then takes the fitted kernel model)."""
    kernels = {_point(s.record): s.measured_us for s in records
               if s.record.kind == "attention_decode"}
    out = []
    for s in records:
        r = s.record
        kernel = kernels.get(_point(r)) if (r.kind == "layer_part" and
                                           r.extra.get("part") == "attention_block") else None
        if kernel is not None:
            r = r.model_copy(update={"extra": {**r.extra, ATTENTION_KERNEL_US: kernel}})
            s = replace(s, record=r)
        out.append(s)
    return out
