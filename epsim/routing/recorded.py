"""The recorded expert loads epsim ships (`epsim/data/routing`, PROVENANCE.md there) and the
rule that picks one for a workload: the recording of the same phase at the nearest lengths.

The rule is fixed before any prediction is compared (it never looks at a measured time):
distance is Euclidean in (log input length, log output length) for decode recordings (a decode
batch's routing depends on the prompt and on how far generation has run) and in log input
length for prefill recordings (which state only an input length).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "routing"
MODEL = "DeepSeek-V3"                   # the model they were recorded on (R1 shares its shapes)


@dataclass(frozen=True)
class Recording:
    """One recorded load file.

    Attributes:
        phase: "decode" | "prefill" (the SGLang server that recorded it).
        input_len: the benchmark's input length, tokens.
        output_len: its output length, tokens (None: a prefill-only recording).
    """

    phase: str
    input_len: int
    output_len: int | None = None

    @property
    def name(self) -> str:
        out = f"out{self.output_len}" if self.output_len else ""
        return f"{self.phase}_in{self.input_len}{out}"

    @property
    def path(self) -> Path:
        return DATA_DIR / f"sglang_dsv3_{self.name}.json.gz"


RECORDINGS = (Recording("decode", 1000, 1000), Recording("decode", 2000, 100),
              Recording("decode", 1800, 100), Recording("decode", 500, 1500),
              Recording("prefill", 512), Recording("prefill", 1024), Recording("prefill", 2048),
              Recording("prefill", 4096))


def nearest(phase: str, input_len: int, output_len: int) -> Recording:
    """The recording of `phase` nearest to the lengths (see the module doc); ties: the first.

    Args:
        phase: "decode" (also an aggregated server's batches: decode steps dominate them) or
            "prefill".
    Raises:
        ValueError: a phase with no recording, or lengths < 1.
    """
    if input_len < 1 or output_len < 1:
        raise ValueError(f"input_len ({input_len}) and output_len ({output_len}) must be >= 1")
    found = [r for r in RECORDINGS if r.phase == phase]
    if not found:
        raise ValueError(f"phase ({phase!r}) must be one of "
                         f"{sorted({r.phase for r in RECORDINGS})}")

    def distance(r: Recording) -> float:
        d_in = math.log(input_len / r.input_len)
        d_out = math.log(output_len / r.output_len) if r.output_len else 0.0
        return math.hypot(d_in, d_out)

    return min(found, key=distance)
