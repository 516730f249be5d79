"""Calibration: fit a Profile's cost-model coefficients on measured records.

`calibrate(paths, holdout)` reads record files (`inputs`), keeps the fit set of the hold-out
protocol (`holdout`), fits every component by bounded least squares on the simulator's own
design rows (`fit`, `rebalance`) and returns the profile with its provenance (`build`).
"""

from epsim.calibrate.build import (Calibration, CalibrationWarning, calibrate,
                                   evaluation_profile)
from epsim.calibrate.fit import ComponentFit, fit_component
from epsim.calibrate.holdout import DEFAULT_RULE, Holdout
from epsim.calibrate.inputs import (RecordFileInfo, RecordWarning, SourcedRecord,
                                    default_record_paths, load_records)

__all__ = ["Calibration", "CalibrationWarning", "ComponentFit", "DEFAULT_RULE", "Holdout",
           "RecordFileInfo", "RecordWarning", "SourcedRecord", "calibrate",
           "default_record_paths", "evaluation_profile", "fit_component", "load_records"]
