"""Per-point residuals of the BF16 fused Triton MoE (`local+graph/experts`) along tokens: the
tokens hold-out of benchmarks/aic_holdout.py (fit tokens per rank <= 1024, judge 2048-16384),
every single-GPU record of one system priced by that fit, fitted and judged rows alike, with
the tile config it runs (`epsim.fused_moe_config`: D the default's large tile, T a tuned JSON
or the small default tile at M <= E, with `BMxBN` where a readable tuned JSON gives the tile,
`TUNED_TILES`), its achieved TFLOP/s and weight stream:

    python benchmarks/experts_tokens_residuals.py --system h100_sxm

Records: runs/aic/<system>_sglang_<version>.jsonl.gz (as benchmarks/aic_holdout.py reads them).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import records_of  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.cost.experts import record_projections  # noqa: E402
from epsim.fused_moe_config import record_default_tile, record_tuned_tile  # noqa: E402
from epsim.validate.extrapolation import FIT_MAX_TOKENS, judge, split_tokens  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--system", default="h100_sxm", choices=[s for s, g in AIC_TO_ZOO.items() if g])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    raw, files = records_of(args.system)
    raw = [s for s in raw if s.record.kind == "experts" and s.record.backend == "local"]
    fit, judged = split_tokens(raw)
    where = {s.where: s.record for s in fit + judged}
    rows = []
    for g in judge("tokens", fit, fit + judged, files, pair=AIC_TO_ZOO[args.system]):
        r = where[g.where]
        rows.append((r.num_experts, r.moe_intermediate_size, r.hidden_size, r.top_k,
                     r.num_tokens_per_rank, g.measured_us, g.predicted_us, r))
    print("shape / tokens, tile (D default, T tuned or small, TBMxBN a readable tuned JSON's), measured and "
          "predicted µs, error, TFLOP/s, weight GB/s (weights of the experts touched over the call)")
    shape = None
    for e, n, h, k, t, measured, predicted, r in sorted(rows, key=lambda x: x[:5]):
        if (e, n, h, k) != shape:
            shape = (e, n, h, k)
            print(f"E {e} N {n} H {h} top-{k}")
        up = record_projections(r)
        flops = 2.0 * (up + 1) * h * n * t * k
        weight_bytes = (up + 1) * h * n * 2.0 * min(e, t * k)
        side = "judged" if t > FIT_MAX_TOKENS else "fit"
        tile = record_tuned_tile(r)
        kind = "D" if record_default_tile(r) else ("T" if tile is None else f"T{tile[0]}x{tile[1]}")
        print(f"  {t:6d} {kind:8s} {side:6s} {measured:10.1f} "
              f"{predicted:10.1f} {100 * (predicted / measured - 1):+7.1f} % "
              f"{flops / measured * 1e-6:6.0f} {weight_bytes / measured * 1e-3:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
