"""Fit and hold out the tile model of FlashInfer's trtllm-gen FP8 block GEMM
(`epsim.cost.trtllm_fp8_gemm`) on published B200 kernel timings of the call (issue 39).

    python benchmarks/trtllm_fp8_gemm_fit.py [--out benchmarks/results/trtllm_fp8_gemm_fit.md]

Data: `benchmarks/data/trtllm_fp8_gemm_b200.csv` (op-level, calibration: `gemm_fp8_nt_groupwise`
with `backend="trtllm"` timed alone; sources in the file's header). The four constants
(launch_us, step_us, wave_us >= 0; hbm_eff <= 1) are fitted by least squares on log time, on
the whole table and on two extrapolation hold-outs: tokens (fit <= 256 tokens, predict 512-4096)
and shape (fit two of the three N x K, predict the third). Beside it: the price epsim used
before (the profile's fitted TRT-LLM FP8-block MoE kernel as one expert, less its fixed terms:
the borrowed price, `borrowed_us`, B200 profile of the silicon row `BORROW_ROW`) and a simple
baseline (`a + b x FLOPs`, fitted the same way), and the per-wave roofline (`perwave_us`), the
form the tile model was chosen over. No end-to-end measurement is read.
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from epsim.cost.comm import l2_bytes  # noqa: E402
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm, gemm_us, token_tile  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.zoo import get_hardware  # noqa: E402

DATA = ROOT / "benchmarks/data/trtllm_fp8_gemm_b200.csv"
BORROW_ROW = "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c8_tp8_ep1_133"
SMS = 148                                                    # B200
# DeepSeek-V3/R1's per-GPU block-FP8 linears (hidden 7168, q_lora 1536, kv_lora 512, 128 heads,
# shared expert 2048, dense MLP 18432): (name, n, k)
DEEPSEEK_SHAPES = [("q_a/kv_a", 2112, 7168), ("q_b TP8", 3072, 1536), ("kv_b TP8", 4096, 512),
                   ("o TP8", 7168, 2048), ("shared gate/up TP8", 512, 7168),
                   ("shared down TP8", 7168, 256), ("q_b TP4", 6144, 1536),
                   ("o TP4", 7168, 4096), ("shared gate/up TP4", 1024, 7168),
                   ("dense gate/up TP4", 9216, 7168)]
DEEPSEEK_TOKENS = (4, 32, 256, 7372)


def read_points() -> list[dict]:
    lines = [ln for ln in DATA.read_text().splitlines() if not ln.startswith("#")]
    return [{"m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]), "us": float(r["us"]),
             "source": r["source"]} for r in csv.DictReader(lines)]


def kernel_of(x) -> TrtllmFp8Gemm:
    hw = get_hardware("B200")
    return TrtllmFp8Gemm(SMS, hw.hbm_gbps, l2_bytes("B200"), launch_us=x[0], step_us=x[1],
                         wave_us=x[2], hbm_eff=x[3])


def tile_us(points, x) -> np.ndarray:
    k = kernel_of(x)
    return np.array([gemm_us(np.array(float(p["m"])), p["n"], p["k"], k) for p in points])


def perwave_us(points, x) -> np.ndarray:
    """The alternative form: each wave the longer of a CTA's K loop and its CTAs' HBM bytes
    (a CTA's share of the weight's passes and of the tokens), plus `wave_us`; same constants."""
    k = kernel_of(x)
    out = []
    for p in points:
        tile = token_tile(p["n"], p["k"])
        rows = max(-(-p["m"] // tile), 1)
        ctas = rows * -(-p["n"] // 128)
        weight = float(p["n"]) * p["k"]
        passes = 1 if weight <= k.l2_bytes else rows
        cta_bytes = (weight * passes + p["m"] * p["k"] + 2.0 * p["m"] * p["n"]) / ctas
        rate, loop = k.hbm_eff * k.hbm_gbps * 1e3, -(-p["k"] // 128) * k.step_us
        full, last = divmod(ctas, SMS)
        t = k.launch_us + full * (max(loop, SMS * cta_bytes / rate) + k.wave_us)
        out.append(t + (max(loop, last * cta_bytes / rate) + k.wave_us if last else 0.0))
    return np.array(out)


def fit_tile(points, form=tile_us) -> np.ndarray:
    want = np.log([p["us"] for p in points])
    res = least_squares(lambda x: np.log(form(points, x)) - want, x0=[3.0, 0.2, 0.1, 0.85],
                        bounds=([0.0, 0.0, 0.0, 0.1], [20.0, 5.0, 5.0, 1.0]))
    return res.x


def flops_us(points, x) -> np.ndarray:
    return np.array([x[0] + x[1] * 2e-9 * p["m"] * p["n"] * p["k"] for p in points])


def fit_flops(points) -> np.ndarray:
    want = np.log([p["us"] for p in points])
    return least_squares(lambda x: np.log(flops_us(points, x)) - want, x0=[5.0, 1.0],
                         bounds=([0.0, 0.0], [100.0, 1e3])).x


def borrowed_us(points) -> np.ndarray:
    """The price epsim used before this fit (git 57ba5cd `epsim.cost.trtllm_fp8_gemm`): the B200
    profile's TRT-LLM FP8-block MoE fit as one expert of H = k, I = n / 3, its rows in the
    dense kernel's token tiles, less the MoE's base and per-expert terms."""
    from aic_stages import row_simulation
    from epsim.cost.experts import even_row_tiles, experts_rank_us
    from epsim.cost.quant import quant_expert_gemm, trtllm_gemm
    from epsim.cost.rereads import reread_kb
    from epsim.validate.silicon.rows import default_csv_path, read_rows
    row = next(r for r in read_rows(default_csv_path()) if r.id == BORROW_ROW)
    experts = row_simulation(row).cost_model.params.step(False).experts
    params = dict(experts.params)
    out = []
    for p in points:
        tile = float(token_tile(p["n"], p["k"]))
        gemm = trtllm_gemm(quant_expert_gemm(p["k"], max(p["n"] // 3, 1), "fp8_block", SMS, 1),
                           np.array(tile), "fp8_block", 1)
        rows = np.array([[float(p["m"])]])
        busy = np.ones_like(rows)
        reread = reread_kb(rows, tile, gemm.weight_bytes)[..., None] / experts.reread_gbps
        t = experts_rank_us(rows, busy, even_row_tiles(rows, busy, tile), gemm, params, reread)
        out.append(float(t[0, 0]) - params["base_us"] - params.get("per_expert_us", 0.0))
    return np.array(out)


def mape(pred, points) -> float:
    want = np.array([p["us"] for p in points])
    return float(np.mean(np.abs(pred / want - 1.0)) * 100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/trtllm_fp8_gemm_fit.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")                       # the profile's extrapolation notes
    pts = read_points()
    full = fit_tile(pts)
    borrowed = borrowed_us(pts)
    lines = ["# FlashInfer trtllm-gen FP8 block GEMM: the tile model on published B200 timings", "",
             f"Generated by `python benchmarks/trtllm_fp8_gemm_fit.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}). Data: `{DATA.relative_to(ROOT)}` (op-level).", "",
             "## Fit on all 23 points", "",
             f"launch_us {full[0]:.2f}, step_us {full[1]:.4f}, wave_us {full[2]:.3f}, "
             f"hbm_eff {full[3]:.3f} (B200 {SMS} SMs, datasheet HBM "
             f"{get_hardware('B200').hbm_gbps:.0f} GB/s, L2 {l2_bytes('B200') / 1e6:.0f} MB)", ""]
    # hold-outs: tokens, then each shape
    holds = [("tokens: fit <= 256, predict 512-4096", lambda p: p["m"] <= 256)]
    for shape in sorted({(p["n"], p["k"]) for p in pts}):
        holds.append((f"shape: predict n {shape[0]} k {shape[1]}",
                      lambda p, s=shape: (p["n"], p["k"]) != s))
    lines += ["## Hold-outs (MAPE on the held-out points)", "",
              "| hold-out | points | tile model | per-wave roofline | FLOPs baseline | "
              "borrowed MoE price (no fit) |", "|---|---:|---:|---:|---:|---:|"]
    for name, keep in holds:
        train = [p for p in pts if keep(p)]
        test = [p for p in pts if not keep(p)]
        idx = [i for i, p in enumerate(pts) if not keep(p)]
        wave_x = fit_tile(train, perwave_us)
        lines.append(f"| {name} | {len(test)} | {mape(tile_us(test, fit_tile(train)), test):.1f} % "
                     f"| {mape(perwave_us(test, wave_x), test):.1f} % "
                     f"| {mape(flops_us(test, fit_flops(train)), test):.1f} % "
                     f"| {mape(borrowed[idx], test):.1f} % |")
    lines += ["", "## Per point (tile model fitted on all; borrowed: the price before)", "",
              "| m | n | k | tile | measured µs | tile model µs | borrowed µs | source |",
              "|---:|---:|---:|---:|---:|---:|---:|---|"]
    model = tile_us(pts, full)
    for p, t, b in zip(pts, model, borrowed):
        lines.append(f"| {p['m']} | {p['n']} | {p['k']} | {token_tile(p['n'], p['k'])} | "
                     f"{p['us']:.1f} | {t:.1f} | {b:.1f} | {p['source']} |")
    lines += ["", f"All points: tile model {mape(model, pts):.1f} %, per-wave roofline "
              f"{mape(perwave_us(pts, fit_tile(pts, perwave_us)), pts):.1f} %, borrowed "
              f"{mape(borrowed, pts):.1f} %."]
    lines += ["", "## DeepSeek-R1's block-FP8 linears on one B200 (µs; tile model / borrowed)", "",
              "Shapes at TP 8 and TP 4 (q_a/kv_a replicated); no measurement: what the change does.",
              "", "| GEMM | n | k | tile | " + " | ".join(f"{m} tokens" for m in DEEPSEEK_TOKENS)
              + " |", "|---|---:|---:|---:|" + "---:|" * len(DEEPSEEK_TOKENS)]
    shapes = [{"m": m, "n": n, "k": k} for _, n, k in DEEPSEEK_SHAPES for m in DEEPSEEK_TOKENS]
    ours, theirs = tile_us(shapes, full), borrowed_us(shapes)
    for i, (name, n, k) in enumerate(DEEPSEEK_SHAPES):
        cells = [f"{ours[i * len(DEEPSEEK_TOKENS) + j]:.1f} / {theirs[i * len(DEEPSEEK_TOKENS) + j]:.1f}"
                 for j in range(len(DEEPSEEK_TOKENS))]
        lines.append(f"| {name} | {n} | {k} | {token_tile(n, k)} | " + " | ".join(cells) + " |")
    write_text(Path(args.out), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
