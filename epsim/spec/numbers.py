"""Numbers in user input, checked before pydantic sees them: every float finite, every number
of magnitude at most `MAX_MAGNITUDE`, and `true`/`false` never taken for a number.

One walk over the raw data, for every spec (scenario, HF config, profile, record), so a field
added to any spec model gets these checks without code of its own. pydantic's lax mode would
otherwise read `ep_size: true` as 1 and let `.inf` through to `gt=0` fields.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

from pydantic import BaseModel

MAX_MAGNITUDE = 1e15   # far above any count, rate or duration epsim means; below int64 and 2^53


def _number_kind(annotation: Any) -> str | None:
    """"an integer" / "a number" for a field of ints / numbers (Optional allowed), else None."""
    if typing.get_origin(annotation) not in (None, typing.Union, types.UnionType):
        return None                                   # list[float], dict[str, int], Literal[...]
    args = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)]
    if not args or any(a not in (int, float) for a in args):
        return None
    return "a number" if float in args else "an integer"


def _strip_optional(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _model_of(annotation: Any, value: Any) -> type[BaseModel] | None:
    """The model a mapping is validated as: the annotation's model, or the member of a tagged
    union picked by the mapping's `kind`."""
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    models = [m for m in typing.get_args(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    kind = value.get("kind") if isinstance(value, dict) else None
    tagged = [m for m in models if m.model_fields.get("kind") is not None
              and m.model_fields["kind"].default == kind]
    return tagged[0] if len(tagged) == 1 else None


def _inner(annotation: Any, position: int) -> Any:
    """`X` of `list[X]` (position 0) or of `dict[str, X]` (position 1), else None."""
    args = typing.get_args(_strip_optional(annotation))
    return args[position] if len(args) > position else None


def check_numbers(data: Any, cls: type[BaseModel] | None = None) -> tuple[str, str] | None:
    """The first bad number in `data` as (dotted path, message), or None.

    Args:
        data: raw input (dicts, lists, scalars) about to be validated as `cls`.
        cls: the model, for the bool check (a bool is refused where the field, a list's item
            or a mapping's value is declared a number).
    """
    stack: list[tuple[Any, tuple, Any]] = [(data, (), cls)]
    while stack:
        value, path, annotation = stack.pop()
        if isinstance(value, bool):
            kind = _number_kind(annotation) if annotation is not None else None
            if kind is not None:
                return _dotted(path), f"({str(value).lower()}) must be {kind}, not true/false"
            continue
        if isinstance(value, float) and not math.isfinite(value):
            return _dotted(path), f"({value}) must be a finite number"
        if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
            return _dotted(path), f"({_short(value)}) must be at most {MAX_MAGNITUDE:g} in magnitude"
        if isinstance(value, dict):
            model = _model_of(annotation, value) if annotation is not None else None
            for key, child in value.items():
                if model is not None:
                    field = model.model_fields.get(key) if isinstance(key, str) else None
                    inner = field.annotation if field is not None else None
                else:
                    inner = _inner(annotation, 1) if annotation is not None else None
                stack.append((child, path + (key,), inner))
        elif isinstance(value, (list, tuple)):
            if all(type(x) is float or type(x) is int for x in value):     # the common case, fast
                if all(abs(x) <= MAX_MAGNITUDE for x in value):           # False for NaN too
                    continue
            inner = _inner(annotation, 0) if annotation is not None else None
            stack.extend((child, path + (i,), inner) for i, child in enumerate(value))
    return None


def _short(value: int | float) -> str:
    """A huge number in a few characters (an int of 400 digits is no float)."""
    if isinstance(value, int) and value.bit_length() > 1000:
        return f"an integer of ~{int(value.bit_length() * 0.30103)} digits"
    return f"{float(value):.3g}"


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "(top level)"
