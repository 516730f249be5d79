"""Numbers and times as a person reads them, the one convention of every line epsim prints: fixed
point with about four significant digits and never scientific notation (`number`, `brief`),
times and sizes with their SI unit (`duration`, `size`), aligned tables (`table`).

The CLI's output (`epsim.commands.output`), reports, budgets and plan answers all format
through here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def brief(value, digits: int = 3) -> str:
    """A number inside a sentence: `number` without trailing zeros (`50`, `61.2`, `1020`), as
    `:.3g` reads but never `1.02e+03`."""
    text = number(value, digits)
    return text.rstrip("0").rstrip(".") if "." in text else text


def number(value, digits: int = 4) -> str:
    """A number for a person: fixed point with about `digits` significant digits, never
    scientific notation; integers as they are; `-` for None or NaN, `yes`/`no` for booleans."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value.is_integer() and abs(value) < 1e15:
            return f"{value:.0f}"
        if value == 0 or abs(value) >= 10 ** (digits - 1):
            return f"{value:.0f}"
        decimals = digits - 1 - math.floor(math.log10(abs(value)))
        return f"{value:.{min(decimals, 6)}f}"
    return str(value)


def duration(us: float | None) -> str:
    """A time given in µs with its SI unit: `850 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "µs")):
        if abs(us) >= scale:
            return f"{number(us / scale, 3)} {unit}"
    return f"{number(us * 1e3, 3)} ns" if us else "0 µs"


def size(num_bytes: float | None) -> str:
    """Bytes with an SI prefix (1 GB = 1e9 bytes, as the rest of epsim): `37.7 MB`."""
    if num_bytes is None or (isinstance(num_bytes, float) and math.isnan(num_bytes)):
        return "-"
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(num_bytes) >= scale:
            return f"{number(num_bytes / scale, 3)} {unit}"
    return f"{num_bytes:.0f} B"


def table(columns: Sequence[str], rows: Iterable[Sequence], indent: str = "  ") -> list[str]:
    """An aligned table: a header row, then one line per row; numbers right-aligned, text
    left-aligned; cells formatted by `number` unless already strings."""
    cells = [[c if isinstance(c, str) else number(c) for c in row] for row in rows]
    numeric = [all(_numeric(row[j]) for row in cells) if cells else False
               for j in range(len(columns))]
    widths = [max([len(columns[j])] + [len(row[j]) for row in cells]) for j in range(len(columns))]

    def line(values):
        return indent + "  ".join((v.rjust(w) if num else v.ljust(w))
                                  for v, w, num in zip(values, widths, numeric)).rstrip()
    return [line(columns)] + [line(row) for row in cells]


def _numeric(text: str) -> bool:
    if text == "-":
        return True
    head = text.split(" ")[0].replace("%", "").lstrip("+-")
    return head.replace(".", "", 1).isdigit() or head == "inf"
