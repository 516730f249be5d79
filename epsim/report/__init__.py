"""Results of a run: summary numbers and table, time series, figures, a step timeline."""

from epsim.report.summary import (latency_windows, percentiles, request_latencies_ms,
                                  summarize, write_summary, write_timeseries)
from epsim.report.table import format_table

# every file `epsim simulate --out` may write (`epsim.io.rundir`: one this run did not write
# again is stale and removed)
RUN_FILES = ("summary.json", "timeseries.csv", "timeline.json", "latency_cdf.png",
             "time_breakdown.png", "rank_load.png", "eplb_timeline.png", "failure_latency.png")

__all__ = ["RUN_FILES", "format_table", "latency_windows", "percentiles", "request_latencies_ms", "summarize",
           "write_summary", "write_timeseries"]
