"""Refit one component of the shipped AIC profiles in place: DeepEP normal's block-FP8 MoE
runner (`deepep/experts_fp8_block/normal`, `epsim.cost.normal_runner`), on its system's
records alone -- the same fit `scripts/aic_profiles.py` gives it (each component is fitted on
its own records; H200 checked equal), without refitting the rest.

    python scripts/aic_refit_deepep_normal.py --systems h200_sxm b200_sxm [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fp8_block_experts_holdout import fp8_block_records  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.calibrate.build import fit_records  # noqa: E402
from epsim.calibrate.holdout import Holdout  # noqa: E402

KEY = "deepep/experts_fp8_block/normal"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", required=True)
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for system in args.systems:
        raw, files, _ = fp8_block_records(system, args.cache)
        comp = fit_records([s for s in raw if s.record.backend == "deepep"], files, Holdout(),
                           name=system).profile.components[KEY]
        path = ROOT / f"epsim/data/profiles/aic_{AIC_TO_ZOO[system].lower()}.json"
        profile = json.loads(path.read_text())
        shipped = profile["components"][KEY]
        shipped["params"] = {k: float(v) for k, v in comp.params.items()}
        shipped["residuals"] = {k: float(v) for k, v in dict(comp.residuals).items()}
        path.write_text(json.dumps(profile, indent=1) + "\n")
        print(f"{system}: {KEY} {shipped['params']} (fit MAPE {shipped['residuals']['mape']} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
