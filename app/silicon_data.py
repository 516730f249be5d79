"""What the app's Silicon page shows: a run of `epsim validate --silicon` read from its per-row
JSON (the whole-set record under benchmarks/results, or a file the user uploads: `--json`'s
output or the `silicon_rows.json.gz` that `--out` writes), as a frame of predictions.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from app.data import upload_name
from epsim.errors import EpsimError
from epsim.validate.silicon import report

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
WHO = ("epsim", "peer")
WHAT = "silicon rows (the JSON of `epsim validate --silicon --json`, or its silicon_rows.json.gz)"


@dataclass(frozen=True)
class SiliconView:
    """A silicon run as the page shows it.

    Attributes:
        entries: one per in-scope row, as `epsim validate --silicon --json` writes them.
        frame: one row per prediction (a row predicted by both has two: `who` epsim and peer),
            with the row's stated facts, status, named gaps and both metrics measured, predicted
            and their error (percent).
        command, peer: how the run was made and which peer ran beside it (None: none).
    """

    entries: list
    frame: pd.DataFrame
    command: str
    peer: str | None


def _check(document, where: str) -> list[dict]:
    """The entries of a parsed run, or one line saying what the file lacks."""
    rows = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(rows, list) or not rows:
        raise EpsimError(f"{where}: {WHAT} must be a JSON object with a non-empty 'rows' list")
    for i, entry in enumerate(rows):
        if not (isinstance(entry, dict) and isinstance(entry.get("measured"), dict)
                and isinstance(entry.get("epsim"), dict) and isinstance(entry.get("bucket"), dict)):
            raise EpsimError(f"{where}: rows[{i}] must be a row entry with 'measured', 'epsim' and "
                             f"'bucket' (as `epsim validate --silicon --json` writes them)")
    return rows


def frame_of(entries: list[dict]) -> pd.DataFrame:
    """Every prediction of `entries` that has figures (predicted or approximated), one per side."""
    out = []
    for e in entries:
        for who in WHO:
            side = e.get(who) or {}
            if side.get("status") not in ("predicted", "approximated"):
                continue
            row = {"row": e["id"], "system": e["bucket"]["system"], "mode": e["bucket"]["mode"],
                   "model": e["bucket"]["model"], "EP": e["bucket"]["ep"], "clients": e.get("concurrency"),
                   "ISL/OSL": f"{e.get('isl')}/{e.get('osl')}", "who": who, "status": side["status"],
                   "gaps": "; ".join(e.get("gaps", ())) or report.NONE_NAMED}
            for metric, label in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
                row[f"measured {label} ms"] = e["measured"][metric]
                row[f"predicted {label} ms"] = side[metric]
                row[f"{label} error %"] = report.signed(e, who, metric)
            out.append(row)
    return pd.DataFrame(out)


@st.cache_data(show_spinner=False, max_entries=4)
def load(name: str, data: bytes | None) -> SiliconView:
    """The recorded run (`data` None) or an uploaded file's bytes, read with epsim's caps (its
    size, also after gzip; UTF-8).

    Raises:
        EpsimError: one line naming the file and what is wrong with it.
    """
    from epsim.io import read_text
    if data is None:
        text, where = read_text(RECORDED, WHAT, error=EpsimError), str(RECORDED.relative_to(ROOT))
    else:
        where = upload_name(name)
        with tempfile.TemporaryDirectory(prefix="epsim-silicon-") as folder:
            staged = Path(folder) / where
            staged.write_bytes(data)
            text = read_text(staged, WHAT, error=EpsimError)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EpsimError(f"{where}: {WHAT} must be JSON (line {exc.lineno}: {exc.msg})") from None
    entries = _check(document, where)
    return SiliconView(entries, frame_of(entries), str(document.get("command", "")), document.get("peer"))
