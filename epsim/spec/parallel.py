"""How one serving instance splits its GPUs, in SGLang's terms, and the rules a layout must meet.

SGLang's world (no pipeline parallelism) is `tp_size` GPUs. With `enable_dp_attention` the
attention runs in `dp_size` data-parallel groups of `attn_tp_size = tp_size / dp_size` GPUs
each (tensor-parallel inside a group); without it, one group of all `tp_size` GPUs. The MoE
layers split the same GPUs into `ep_size` expert-parallel ranks of `moe_tp_size = tp_size /
ep_size` GPUs each, every expert's intermediate split over its rank's GPUs
(`distributed/parallel_state.py`: `attn_tp_size = tp_size // attn_cp_size // attn_dp_size`,
`moe_tp_size = tp_size // moe_ep_size // moe_dp_size`; context parallelism and MoE DP are 1
here). The all-to-all backends (`deepep`, `mooncake`, and epsim's `torch` reference) run with
`ep_size = tp_size` (SGLang's `server_args.py` sets it), so MoE-TP goes with `none`.

Unset sizes keep what epsim meant before they existed: `tp_size = ep_size * moe_tp_size`
(`ep_size` GPUs), `dp_size = tp_size` with DP attention (one GPU per DP group), 1 without.
"""

from __future__ import annotations

from dataclasses import dataclass

from epsim import vocab


@dataclass(frozen=True)
class Parallel:
    """A resolved layout (every size set).

    Attributes:
        tp_size: GPUs of the instance (SGLang's `tp_size`, its whole world).
        dp_size: attention data-parallel groups (1 without DP attention).
        attn_tp_size: GPUs sharing one DP group's attention, heads split (`tp_size / dp_size`).
        ep_size: expert-parallel ranks.
        moe_tp_size: GPUs of one EP rank, each expert's intermediate split over them.
    """

    tp_size: int
    dp_size: int
    attn_tp_size: int
    ep_size: int
    moe_tp_size: int

    @property
    def num_gpus(self) -> int:
        return self.tp_size

    def describe(self) -> str:
        """`8 GPUs: attention DP 2 x TP 4, MoE EP 8 x TP 1`."""
        return (f"{self.tp_size} GPUs: attention DP {self.dp_size} x TP {self.attn_tp_size}, "
                f"MoE EP {self.ep_size} x TP {self.moe_tp_size}")


def resolve_parallel(ep_size: int, tp_size: int | None, dp_size: int | None,
                     moe_tp_size: int | None, enable_dp_attention: bool,
                     backend: str) -> Parallel:
    """The layout of a deployment's sizes under SGLang's rules.

    Raises:
        ValueError: `<field> (<value>) must ...` naming the fields of a bad combination.
    """
    if tp_size is None:
        tp_size = ep_size * (moe_tp_size or 1)
    if tp_size % ep_size:
        raise ValueError(f"ep_size ({ep_size}) must divide tp_size ({tp_size}): SGLang splits the "
                         f"tp_size GPUs into ep_size expert ranks of moe_tp_size = tp_size / "
                         f"ep_size GPUs")
    derived = tp_size // ep_size
    if moe_tp_size is not None and moe_tp_size != derived:
        raise ValueError(f"moe_tp_size ({moe_tp_size}) must be tp_size / ep_size ({tp_size} / "
                         f"{ep_size} = {derived}), as SGLang derives it")
    if derived > 1 and vocab.is_deepep_class(backend):
        raise ValueError(f"moe_tp_size ({derived} = tp_size {tp_size} / ep_size {ep_size}) must "
                         f"be 1 with moe_a2a_backend {backend!r}: SGLang sets ep_size = tp_size for "
                         f"all-to-all backends; MoE-TP runs with moe_a2a_backend 'none'")
    if enable_dp_attention:
        dp = tp_size if dp_size is None else dp_size
        if tp_size % dp:
            raise ValueError(f"dp_size ({dp}) must divide tp_size ({tp_size}) with "
                             f"enable_dp_attention: each DP group runs its attention on "
                             f"tp_size / dp_size GPUs")
    else:
        dp = 1 if dp_size is None else dp_size
        if dp != 1:
            raise ValueError(f"dp_size ({dp}) must be 1 without enable_dp_attention: SGLang then "
                             f"runs dp_size separate instances (simulate one; a fleet plan "
                             f"counts instances)")
    return Parallel(tp_size=tp_size, dp_size=dp, attn_tp_size=tp_size // dp, ep_size=ep_size,
                    moe_tp_size=derived)


# SGLang's fp8 block-quantised linear layers need each GPU's share of an output dimension to
# be whole 128-blocks (`Fp8LinearMethod`: "not divisible by weight quantization block_n")
FP8_BLOCK = 128


def model_problem(parallel: Parallel, num_heads: int, num_kv_heads: int,
                  moe_intermediate_size: int, experts_format: str, attention: str) -> str | None:
    """Why a layout cannot serve a model (None if it can): SGLang's checks on the model's
    shapes (`<field> (<value>) must ...`, naming the deployment fields)."""
    attn_tp = parallel.attn_tp_size
    if num_heads % attn_tp:
        return (f"tp_size / dp_size ({parallel.tp_size} / {parallel.dp_size} = {attn_tp} GPUs per "
                f"attention group) must divide the model's num_attention_heads ({num_heads})")
    if attention == "gqa" and num_kv_heads % attn_tp and attn_tp % num_kv_heads:
        return (f"tp_size / dp_size ({attn_tp} GPUs per attention group) must divide the model's "
                f"num_key_value_heads ({num_kv_heads}) or be a multiple of it (replicated KV heads)")
    moe_tp = parallel.moe_tp_size
    if moe_intermediate_size % moe_tp:
        return (f"moe_tp_size ({moe_tp}) must divide the model's moe_intermediate_size "
                f"({moe_intermediate_size})")
    if experts_format == "fp8_block" and (moe_intermediate_size // moe_tp) % FP8_BLOCK:
        return (f"moe_tp_size ({moe_tp}) must leave whole 128-blocks of the experts' FP8 weights: "
                f"moe_intermediate_size / moe_tp_size ({moe_intermediate_size} / {moe_tp}) is not "
                f"a multiple of {FP8_BLOCK}")
    return None
