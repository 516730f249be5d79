"""The stages of a wide-EP DeepSeek-V3 decode step on H100, as the datasheet profile prices them,
against aiconfigurator-core's H100 SGLang op tables at the same shapes: which stage of the
no-overlap step is too cheap or too dear (docs/model.md, "Two-batch overlap").

    python benchmarks/lmsys_decode_stages.py [--out benchmarks/results/lmsys_decode_stages.md]

Shapes: the LMSYS decode deployment's (DP attention, 128 heads per GPU, BF16 cache, FP8 block
weights, DeepEP low-latency with FP8 dispatch), at 256 requests per GPU (the step without
two-batch overlap) and 128 (one micro-batch with it), 2048 keys each; the routed experts and
the exchanges at the EP sizes AIC measured (EP 64 and 128; LMSYS ran EP 72). Reads only the
installed aiconfigurator-core's `h100_sxm` tables (op-level calibration data, every matching
row averaged); no end-to-end figure is read. Device time on both sides (AIC's MLP row times the
module with its activation kernels, as SGLang runs it).
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate.aic_tables import package_root, package_version  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.cost import build_tables, contiguous_placement  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.cost.dense_gemm import gemm_us, gemm_work  # noqa: E402
from epsim.eplb import Placement  # noqa: E402
from epsim.validate.published_predict import cost_model, deepep_latency_us  # noqa: E402
from epsim.zoo import get_hardware, get_model  # noqa: E402

GPU, SYSTEM = "H100", "h100_sxm"
TABLES = {"mla": "mla/sglang/0.5.14/generation_mla_perf.parquet",
          "gemm": "gemm/sglang/0.5.6.post2/gemm_perf.parquet",
          "mlp": "mlp/sglang/0.5.6.post2/wideep_generation_mlp_perf.parquet",
          "moe": "moe/sglang/0.5.10/wideep_generation_moe_perf.parquet",
          "ll": "comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet"}
KEYS = 2047            # the MLA table's `step` nearest LMSYS's 2,000-token contexts
BATCHES = (128, 256)   # requests per GPU: one micro-batch under the overlap, the whole step
EP_SIZES = (64, 128)   # the experts and exchanges where AIC measured DeepSeek's shape


def _frame(name: str):
    import pandas as pd
    return pd.read_parquet(package_root() / "data" / SYSTEM / TABLES[name])


def measured(frame, column: str = "", **where) -> float:
    """Mean of `column` (µs; default the table's latency in ms, converted) over the rows
    matching `where` (NaN where none)."""
    keep = np.ones(len(frame), dtype=bool)
    for name, value in where.items():
        keep &= (frame[name] == value).to_numpy()
    if not keep.any():
        return float("nan")
    if column:
        return float(frame[keep][column].mean())
    return float(frame[keep]["avg_ms" if "avg_ms" in frame else "latency"].mean()) * 1e3


def experts_us(ep: int, tokens_per_rank: int) -> float:
    """The datasheet profile's routed experts on the busiest rank, balanced loads."""
    model = get_model("DeepSeek-V3")
    cm = cost_model(model, GPU, ep, "deepep", "low_latency", dispatch_dtype="fp8")
    e = model.num_experts
    loads = np.full((1, e), ep * tokens_per_rank * model.top_k / e)        # [layers, experts]
    per_node = get_hardware(GPU).gpus_per_node
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, e, ep), e, ep, per_node))
    moe = cm.moe(loads, np.full(ep, float(tokens_per_rank)), tables, "decode")
    return float(np.max(moe.experts_us))


def stage_rows() -> list[tuple[str, float, float]]:
    """(stage, epsim datasheet µs, AIC measured µs) for every compared stage."""
    model = get_model("DeepSeek-V3")
    cm = cost_model(model, GPU, 72, "deepep", "low_latency", dispatch_dtype="fp8",
                    enable_dp_attention=True, cuda_graph_max_bs=max(BATCHES))
    mla_p, rates = cm.params.attention.mla, cm.params.gemm_rates(True)
    mla, gemm, mlp, moe, ll = (_frame(k) for k in ("mla", "gemm", "mlp", "moe", "ll"))
    o_in = mla_p.heads * mla_p.v_dim                       # o_proj's input: 128 heads x 128
    out = []
    for b in BATCHES:
        batch = BatchCounts.uniform_decode(72, b, KEYS)
        out.append((f"MLA decode kernel, {b} x {KEYS} keys, BF16 cache (AIC: FlashAttention-3)",
                    float(cm._decode_kernel.us(batch.decode_tokens, batch.decode_context)[0]),
                    measured(mla, kernel_source="flash_attention", kv_cache_dtype="bfloat16",
                             num_heads=128, batch_size=b, step=KEYS)))
    for b in BATCHES:
        out.append((f"o_proj GEMM, m {b}, FP8 block",
                    float(gemm_us(gemm_work(np.array([float(b)]), model.hidden_size, o_in,
                                            mla_p.gemm_format, mla_p.num_sms),
                                  mla_p.gemm, mla_p.hardware, mla_p.gemm_format)[0]),
                    measured(gemm, gemm_dtype="fp8_block", m=b, n=model.hidden_size, k=o_in)))
    for b in BATCHES:
        out.append((f"shared expert MLP, {b} tokens (AIC: the module)",
                    float(cm._mlp_us(np.array([float(b)]), model.moe_intermediate_size,
                                     rates)[0]),
                    measured(mlp, num_token=b, intermediate_size=model.moe_intermediate_size)))
    for ep in EP_SIZES:
        out.append((f"routed experts, EP {ep}, 128 tokens/GPU (AIC: deepepmoe, uniform)",
                    experts_us(ep, 128),
                    measured(moe, moe_ep_size=ep, num_tokens=ep * 128, distribution="uniform")))
    for t in BATCHES:
        for stage in ("dispatch", "combine"):
            out.append((f"DeepEP low-latency {stage}, EP 64 (8 nodes), {t} tokens/GPU",
                        deepep_latency_us(GPU, 64, t, stage),
                        measured(ll, f"{stage}_avg_t_us", node_num=8, num_experts=256,
                                 hidden_size=model.hidden_size, num_token=t)))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/lmsys_decode_stages.md"))
    args = parser.parse_args(argv)
    lines = ["# A wide-EP DeepSeek-V3 decode step's stages on H100: datasheet against AIC's op tables",
             "", f"Generated by `python benchmarks/lmsys_decode_stages.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). "
             f"epsim: the datasheet profile of {GPU} (as `epsim validate --published` prices "
             f"the LMSYS rows); AIC: the mean of the matching rows of "
             + ", ".join(f"`{t}`" for t in TABLES.values()) + ". Device time, µs.", "",
             "| stage | epsim datasheet | AIC measured | epsim - AIC |", "|---|---:|---:|---:|"]
    for name, ours, theirs in stage_rows():
        lines.append(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours - theirs:+.1f} |")
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
