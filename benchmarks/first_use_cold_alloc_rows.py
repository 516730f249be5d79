"""The cold B200 runs whose prompts never chunk: epsim's TTFT and TPOT before and after the paged KV
allocator's first-use compiles beside the FMHA build (`deployment.first_use_compile.kernel:
flashinfer_cutlass_fmha` with `alloc_compile_s`, `epsim.sim.first_use.FirstUseTerms`).

    python benchmarks/first_use_cold_alloc_rows.py --csv CSV
    python -m epsim.cli validate --silicon CSV --approximate --no-peer --workers 1 --json > AFTER
    python benchmarks/first_use_cold_alloc_rows.py --after AFTER [--write]

CSV (23 rows, each run once: the `dsr1_*` ids, not their `2026_04_06_*` export twins): the silicon
sample's InferenceX B200 DeepSeek-R1 SGLang agg rows measured on 2025-11-10 with no warm-up
(lmsysorg/sglang:v0.5.5) whose first wave fits one chunk (NVFP4 TP4 and TP8 at 1k/1k and 1k/8k
with 4-16 clients; FP8 TP8 at 1k/1k with 4-16, at 1k/8k and 8k/1k with 4: its chunk is 32k); two
cold runs whose first wave chunks (NVFP4 TP4 8k/1k at 4 clients, TP8 1k/1k at 32: the FMHA build);
and four warmed controls that must not move (three NVFP4 TP8/EP8 1k/1k rows of SGLang 0.5.9 at 4,
16 and 64 clients, under `sglang_paged_alloc` already; one H200 FP8 TP8 1k/1k row at 4 clients,
SGLang's Triton fused MoE). Before: the whole-set record's entries of the same rows
(`benchmarks/results/silicon_rows.json.gz`, made by the code before the change). The silicon
sample is validation data: nothing here sets a constant; the compile times are our Triton 3.5.1
sm100 measurement (`benchmarks/first_use_alloc_aot.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from first_use_fmha_rows import compare_main, gap_summary, priced_rows, write_ids_csv

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "first_use_cold_alloc_rows.md"
COLD = ([f"dsr1_b200_sglang_fp4_agg_{shape}_c{c}_{cfg}" for cfg in ("cfg88", "cfg99")
         for shape in ("1024x1024", "1024x8192") for c in (4, 8, 16)]
        + [f"dsr1_b200_sglang_fp8_agg_1024x1024_c{c}_cfg199" for c in (4, 8, 16)]
        + ["dsr1_b200_sglang_fp8_agg_1024x8192_c4_cfg199",
           "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg199"])
CHUNKED = ["dsr1_b200_sglang_fp4_agg_8192x1024_c4_cfg88",
           "dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg99"]
WARM = ["2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c4_tp8_0_ep8_0_298",
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c16_tp8_0_ep8_0_257",
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c64_tp8_0_ep8_0_271",
        "2026_03_25_deepseek_r1_h200_sxm_sglang_fp8_agg_1024x1024_c4_tp8_0_ep1_0_289"]


def _fields(entry: dict, said: str) -> dict:
    return {"alloc": "paged KV allocator" in said, "build": "CUTLASS FMHA" in said,
            "cold": entry["id"] in COLD + CHUNKED, "chunked": entry["id"] in CHUNKED}


def table(found: list[dict]) -> str:
    lines = ["| row | layout | ISL/OSL | clients | warm-up | FMHA term | allocator term | TTFT measured "
             "ms | before | after | TPOT measured ms | before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| {r['id']} | {r['layout']} | {r['isl']}/{r['osl']} | {r['clients']} | "
                     f"{'none' if r['cold'] else '2N'} | {'yes' if r['build'] else 'no'} | "
                     f"{'yes' if r['alloc'] else 'no'} | {r['ttft']:.0f} | {r['ttft_before']:.0f} "
                     f"| {r['ttft_after']:.0f} | {r['tpot']:.1f} | {r['tpot_before']:.1f} | "
                     f"{r['tpot_after']:.1f} |")
    groups: dict[str, list[dict]] = {}
    for r in found:
        if not r["cold"]:
            name = "warmed controls"
        elif r["chunked"]:
            name = "cold, chunked first wave"
        else:
            name = f"cold, one chunk: {r['precision']}"
        for key in (name, "cold, one chunk: all" if name.startswith("cold, one") else None):
            if key:
                groups.setdefault(key, []).append(r)
    return "\n".join(gap_summary(groups)) + "\n\n" + "\n".join(lines)


def write_csv(path: Path) -> int:
    """The compared rows of the sample (module doc) as a silicon CSV; how many."""
    sys.path.insert(0, str(ROOT))
    from epsim.validate.silicon.rows import default_csv_path
    return write_ids_csv(path, set(COLD + CHUNKED + WARM), default_csv_path())


def main(argv=None) -> int:
    heading = ("# The cold B200 runs whose prompts never chunk: the paged allocator's compiles\n\n"
               "`python benchmarks/first_use_cold_alloc_rows.py --after AFTER --write`, AFTER from "
               "`epsim validate --silicon CSV --approximate --no-peer --workers 1 --json` on the CSV "
               "of `--csv` (what is compared: the script's docstring).\n\n")
    return compare_main(argv, __doc__,
                        write_csv, lambda after, record: table(priced_rows(after, record, _fields)),
                        RESULTS, heading)


if __name__ == "__main__":
    raise SystemExit(main())
