"""Validation: the cost models' predictions against measured records, by the hold-out protocol.

`compare` predicts every record (the simulator's formulas on the record's own counts),
`table` groups the errors (MAPE, worst case, skew effect) into markdown and CSV, `plots`
draws them, `report.validate` does all of it for record files and a profile.
"""

from epsim.validate.compare import Comparison, compare, skew_label
from epsim.validate.report import ValidationReport, validate
from epsim.validate.table import (ErrorStats, SkewEffect, group, markdown, skew_effects, summary_rows,
                                  verdict)

__all__ = ["Comparison", "ErrorStats", "SkewEffect", "ValidationReport", "compare", "group",
           "markdown", "skew_effects", "skew_label", "summary_rows", "validate", "verdict"]
