"""A sweep: dotted scenario keys, each with a list of values, expanded as a Cartesian product.

`--sweep deployment.ep_size=8,16,32` names a field by its dotted path in the scenario tree
and lists values that parse as YAML scalars (`true`, `1e-3`, `deepep`, `[...]`, `{...}`).
Ranges expand inclusively: `8:128:x2` is 8,16,32,64,128 (geometric, factor > 1) and
`0:64:+16` is 0,16,32,48,64 (arithmetic, step > 0). Keys are checked against the scenario
schema before anything runs; values are checked per point when its scenario is validated.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel

from epsim.errors import EpsimError, SpecError
from epsim.io import load_yaml
from epsim.spec.errors import models_in
from epsim.spec.scenario import Scenario

MAX_RANGE_VALUES = 10_000
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^({_NUMBER}):({_NUMBER}):([x+])({_NUMBER})$")
_SYNTAX = "KEY=V1,V2,... or KEY=START:STOP:xFACTOR or KEY=START:STOP:+STEP"


@dataclass(frozen=True)
class SweepAxis:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes (`[1,2],[3]` is two values)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if re.fullmatch(r"[-+]?\d+", text) else value


def expand_range(text: str, where: str) -> list[int | float] | None:
    """`START:STOP:xFACTOR` or `START:STOP:+STEP` -> values up to STOP inclusive; None if
    `text` is not a range. Integers stay integers when START and STEP are integers."""
    match = _RANGE.match(text)
    if match is None:
        return None
    start, stop, op, step = (_number(match.group(1)), _number(match.group(2)), match.group(3),
                             _number(match.group(4)))
    if op == "x" and not (step > 1 and start > 0):
        raise SpecError(f"{where}: range ({text!r}) must have START > 0 and FACTOR > 1")
    if op == "+" and not step > 0:
        raise SpecError(f"{where}: range ({text!r}) must have STEP > 0")
    if stop < start:
        raise SpecError(f"{where}: range ({text!r}) must have STOP >= START")
    values: list[int | float] = []
    tolerance = 1e-9 * max(abs(stop), 1.0)
    for n in itertools.count():
        # each value from the start (no accumulated float drift); int ** int stays int
        value = start * step ** n if op == "x" else start + step * n
        if value > stop + tolerance:
            break
        if n >= MAX_RANGE_VALUES:
            raise SpecError(f"{where}: range ({text!r}) must expand to at most {MAX_RANGE_VALUES} values")
        values.append(value if isinstance(value, int) else round(value, 12))
    return values


def parse_value(text: str) -> Any:
    """One sweep value as a YAML scalar (or flow list/mapping); unparsable text stays a string.

    Numbers YAML 1.1 leaves as strings (`1e3`, `1e-3` need a dot there) become numbers.
    """
    try:
        value = load_yaml(text, "--sweep")
    except EpsimError:
        return text
    if isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
        return _number(value.strip())
    return value


def parse_sweep(text: str) -> SweepAxis:
    """`deployment.ep_size=8,16,32` -> SweepAxis("deployment.ep_size", (8, 16, 32)).

    Raises:
        SpecError: no `=`, an empty key or key part, an empty value, or a bad range.
    """
    where = f"--sweep ({text!r})"
    if "=" not in text:
        raise SpecError(f"{where} must look like {_SYNTAX}")
    key, raw = (part.strip() for part in text.split("=", 1))
    if not key or any(not part.strip() for part in key.split(".")):
        raise SpecError(f"{where} must have a dotted key before '=', like deployment.ep_size")
    if not raw:
        raise SpecError(f"{where} must list at least one value after '='")
    values: list[Any] = []
    for token in _split_top_level(raw):
        if not token:
            raise SpecError(f"{where} must not have an empty value (check for a stray comma)")
        expanded = expand_range(token, where)
        values.extend(expanded if expanded is not None else [parse_value(token)])
    return SweepAxis(key, tuple(values))


def check_key(key: str, root: type[BaseModel] | None = None, flag: str = "--sweep") -> None:
    """Check that a dotted key names a field of the scenario schema.

    A union (the `kind` variants of `workload.skew`) accepts a field of any variant; whether
    the point's variant has it is checked when the point is validated.

    Raises:
        SpecError: naming the key path and the fields allowed at the level that failed.
    """
    if root is None:
        root = Scenario
    models: list[type[BaseModel]] = [root]
    parts = key.split(".")
    for depth, part in enumerate(parts):
        at = ".".join(parts[:depth]) or "(top level)"
        if not models:
            raise SpecError(f"{flag} key ({key}) must name a scenario field: {at} is a value, "
                            f"not a mapping (sweep the whole value instead)")
        fields = {name: info for model in models for name, info in model.model_fields.items()}
        if part not in fields:
            raise SpecError(f"{flag} key ({key}) must name a scenario field: {part!r} is not a "
                            f"field of {at}; allowed: {', '.join(sorted(fields))}")
        models = models_in(fields[part].annotation)


def check_axes(axes: list[SweepAxis]) -> None:
    """Each key once, and no key inside another swept key (`model` and `model.num_layers`)."""
    keys = [axis.key for axis in axes]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise SpecError(f"--sweep key ({key}) must be given once; merge its values into one --sweep")
        for other in keys[:i]:
            if key.startswith(other + ".") or other.startswith(key + "."):
                raise SpecError(f"--sweep key ({key}) must not overlap another swept key ({other})")
        check_key(key)


def num_points(axes: list[SweepAxis]) -> int:
    count = 1
    for axis in axes:
        count *= len(axis.values)
    return count


def expand(axes: list[SweepAxis]) -> Iterator[dict[str, Any]]:
    """The Cartesian product, first axis outermost: `{key: value}` per point."""
    keys = [axis.key for axis in axes]
    for combo in itertools.product(*(axis.values for axis in axes)):
        yield dict(zip(keys, combo))
