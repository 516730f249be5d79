"""Results of a run: summary numbers and table, time series, figures, a step timeline."""

from epsim.report.summary import (format_table, latency_windows, percentiles, request_latencies_ms,
                                  summarize, write_summary, write_timeseries)

__all__ = ["format_table", "latency_windows", "percentiles", "request_latencies_ms", "summarize",
           "write_summary", "write_timeseries"]
