"""`epsim validate`: the profile's predictions against measured records, by the hold-out
protocol; prints the error tables, writes them (markdown, CSV) and the figures with `--out`."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from epsim.errors import EpsimError


def run(args) -> int:
    from epsim.calibrate import default_record_paths
    from epsim.profile import default_profile_path, load_profile
    from epsim.validate import validate

    if args.profile is None and not default_profile_path().is_file():
        raise EpsimError("--profile (none given) must name a profile JSON: no measured profile "
                         "ships in this install")
    profile = load_profile(args.profile)
    paths = [Path(p) for p in args.records] if args.records else default_record_paths()
    if not paths:
        raise EpsimError("--records (none given) must name record files: no records ship in this "
                         "install")
    max_mape = args.max_mape if args.max_mape is not None else 10.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = validate(profile, paths, args.holdout, args.out, args.doc, plots=not args.no_plots,
                          max_mape=max_mape, strict=args.strict)
    for w in caught:
        print(f"epsim validate: warning: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps({"holdout": report.holdout.describe(),
                          "passed": {f"{b}/{k}": ok for (b, k), ok in report.passed.items()},
                          "rows": [dict(r.__dict__, error_pct=r.error_pct) for r in report.rows]},
                         indent=1))
    else:
        print(report.markdown)
        for path in report.files:
            print(f"wrote {path}")
    if args.max_mape is not None and not all(report.passed.values()):
        failed = [f"{b}/{k}" for (b, k), ok in report.passed.items() if not ok]
        print(f"epsim validate: held-out MAPE above {max_mape:g}% for {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0
