"""The P/D rows whose prefill recipe caps its KV pool (`--max-total-tokens`), predicted by this
tree's code beside the whole-set record's prediction and the measured run: what carrying the cap
(`DeploymentSpec.max_total_tokens`) and the prefill pool's hold on a batch until its KV transfer
ends (`epsim.sim.prefill_pool`) change (issue 39).

    python benchmarks/pd_prefill_pool.py [--write]

The rows (`ROWS`): the GB200 / GB300 FP4 8k/1k TP4 prefills beside a wide-EP decode (srt-slurm
`recipes/gb*-fp4/8k1k/mid-curve.yaml`, `max-tpt.yaml`: `--max-total-tokens 131072` and
`--chunked-prefill-size 131072`, a pool of one chunk), the FP4 1k/1k DEP4 prefills (131072 a rank,
8 chunks) and the GB200 FP8 8k/1k DEP8 prefills (524288 a rank, 32 chunks) as controls, and one
row of a December group with no recipe read. Each row alone, `plan_row` then `run.predict` (as
`epsim validate --silicon` prices it); "record" is `benchmarks/results/silicon_rows.json.gz` (the
code before the change until the whole set is re-recorded). Error = predicted / measured - 1, %.
The rows are validation data: nothing here sets a constant.
"""

from __future__ import annotations

import copy
import gzip
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import predict  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "pd_prefill_pool.md"
POOL_OF_ONE_CHUNK = 7          # the first ROWS: the TP4 prefills whose pool is their chunk
_R = "2026_03_25_deepseek_r1_"
ROWS = (
    # FP4 8k/1k TP4 prefill, pool = one chunk
    _R + "gb200_sglang_fp4_disagg_8192x1024_c512_tp4_0_ep1_0_850",
    "2026_04_06_deepseek_r1_gb200_sglang_fp4_disagg_8192x1024_c2048_tp4_ep1_1703",
    _R + "gb200_sglang_fp4_disagg_8192x1024_c4096_tp4_0_ep1_0_849",
    _R + "gb200_sglang_fp4_disagg_8192x1024_c2048_tp4_0_ep1_0_839",
    _R + "gb300_sglang_fp4_disagg_8192x1024_c512_tp4_0_ep1_0_773",
    _R + "gb300_sglang_fp4_disagg_8192x1024_c2048_tp4_0_ep1_0_775",
    _R + "gb300_sglang_fp4_disagg_8192x1024_c4096_tp4_0_ep1_0_774",
    # controls: FP4 1k/1k DEP4 (8 chunks), GB200 FP8 8k/1k DEP8 (32 chunks), no recipe
    "dsr1_gb200_sglang_fp4_disagg_1024x1024_c4096_cfg483",
    "dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483",
    "dsr1_gb300_sglang_fp4_disagg_1024x1024_c4096_cfg576",
    "dsr1_gb300_sglang_fp4_disagg_1024x1024_c8192_cfg576",
    _R + "gb300_sglang_fp4_disagg_1024x1024_c4096_tp4_0_ep4_0_769",
    _R + "gb300_sglang_fp4_disagg_1024x1024_c8192_tp4_0_ep4_0_772",
    _R + "gb200_sglang_fp4_disagg_1024x1024_c4096_tp4_0_ep4_0_840",
    "dsr1_gb200_sglang_fp8_disagg_8192x1024_c2048_cfg533",
    "dsr1_gb200_sglang_fp8_disagg_8192x1024_c6144_cfg533",
    _R + "gb200_sglang_fp8_disagg_8192x1024_c4096_tp8_0_ep8_0_832",
    _R + "gb200_sglang_fp8_disagg_8192x1024_c6144_tp8_0_ep8_0_831",
    "dsr1_gb200_sglang_fp4_disagg_8192x1024_c2048_cfg254",
)


def _err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else 100 * (pred / meas - 1)


def _fmt(err: float | None) -> str:
    return "n/a" if err is None else f"{err:+.0f}"


def table() -> str:
    recorded = {e["id"]: e for e in json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]}
    sample = {row.id: row for row in read_rows(default_csv_path())}
    lines = ["| row | measured TTFT / TPOT ms | record TTFT / TPOT error % | this tree TTFT / TPOT "
             "error % | prefill pool wait ms a forward |", "|---|---|---|---|---|"]
    errs = {"record": [], "tree": []}
    for i, rid in enumerate(ROWS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the profile's extrapolation notes
            entry = predict(plan_row(sample[rid]))
        m, rec = recorded[rid]["measured"], recorded[rid]["epsim"]
        before = (_err(rec.get("ttft_ms"), m["ttft_ms"]), _err(rec.get("tpot_ms"), m["tpot_ms"]))
        after = (_err(entry.get("ttft_ms"), m["ttft_ms"]), _err(entry.get("tpot_ms"), m["tpot_ms"]))
        group = "one chunk" if i < POOL_OF_ONE_CHUNK else "controls"
        errs["record"].append((group, before))
        errs["tree"].append((group, after))
        lines.append(f"| {rid} | {m['ttft_ms']:.0f} / {m['tpot_ms']:.1f} | {_fmt(before[0])} / "
                     f"{_fmt(before[1])} | {_fmt(after[0])} / {_fmt(after[1])} | "
                     f"{_pool_wait_ms(sample[rid])} |")
    lines += ["", "| rows | TTFT MAPE %, record / this tree | TPOT MAPE %, record / this tree |",
              "|---|---|---|"]
    for group in ("one chunk", "controls"):
        mape = {k: [statistics.fmean(abs(e[j]) for g, e in v if g == group and e[j] is not None)
                    for j in (0, 1)] for k, v in errs.items()}
        lines.append(f"| {group} | {mape['record'][0]:.1f} / {mape['tree'][0]:.1f} | "
                     f"{mape['record'][1]:.1f} / {mape['tree'][1]:.1f} |")
    return "\n".join(lines)


def _pool_wait_ms(row) -> str:
    """The wait a full chunk's forward leaves before the next (`epsim.sim.prefill_pool`), or
    "-" where the prefill pool holds two chunks."""
    from epsim.sim.memory import memory_plan
    from epsim.sim.prefill_pool import prefill_hold
    from epsim.spec.scenario import scenario_from_dict
    prefill = plan_row(row).instances[0]
    sc = scenario_from_dict(copy.deepcopy(prefill.data), where="silicon row")
    hold = prefill_hold(sc, memory_plan(sc).max_total_num_tokens)
    return "-" if hold is None else f"{hold.wait_us(hold.chunk_tokens) * 1e-3:.0f}"


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    code = recorded_main(argv, __doc__, RESULTS, "P/D prefill pools that hold one chunk",
                         "python benchmarks/pd_prefill_pool.py --write", table)
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
