"""Numbers in user input, checked before pydantic sees them: every float finite, every number
of magnitude at most `MAX_MAGNITUDE`, and `true`/`false` never taken for a number.

One walk over the raw data, for every spec (scenario, HF config, profile, record), so a field
added to any spec model gets these checks without code of its own. pydantic's lax mode would
otherwise read `ep_size: true` as 1 and let `.inf` through to `gt=0` fields.
"""

from __future__ import annotations

import math
import typing
from typing import Any

from pydantic import BaseModel

MAX_MAGNITUDE = 1e15   # far above any count, rate or duration epsim means; below int64 and 2^53


def _number_kind(annotation: Any) -> str | None:
    """"an integer" / "a number" for a field of ints / numbers (Optional allowed), else None."""
    args = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)]
    if not args or any(a not in (int, float) for a in args):
        return None
    return "a number" if float in args else "an integer"


def _submodel(annotation: Any, value: Any) -> type[BaseModel] | None:
    """The model a mapping value is validated as: the field's model, or the tagged member of a
    union picked by the mapping's `kind`."""
    from epsim.spec.errors import _models_in, _tag_of
    models = _models_in(annotation)
    if len(models) == 1:
        return models[0]
    kind = value.get("kind") if isinstance(value, dict) else None
    tagged = [m for m in models if _tag_of(m) == kind]
    return tagged[0] if len(tagged) == 1 else None


def check_numbers(data: Any, cls: type[BaseModel] | None = None) -> tuple[str, str] | None:
    """The first bad number in `data` as (dotted path, message), or None.

    Args:
        data: raw input (dicts, lists, scalars) about to be validated as `cls`.
        cls: the model, for the bool check (a bool is refused where a field is numeric).
    """
    stack: list[tuple[Any, tuple, Any]] = [(data, (), cls)]
    while stack:
        value, path, model = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            return _dotted(path), f"({value}) must be a finite number"
        if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
            return _dotted(path), f"({value:.3g}) must be at most {MAX_MAGNITUDE:g} in magnitude"
        if isinstance(value, dict):
            fields = model.model_fields if model is not None else {}
            for key, child in value.items():
                field = fields.get(key) if isinstance(key, str) else None
                kind = _number_kind(field.annotation) if field is not None else None
                if kind is not None and isinstance(child, bool):
                    return _dotted(path + (key,)), f"({str(child).lower()}) must be {kind}, not true/false"
                sub = _submodel(field.annotation, child) if field is not None else None
                stack.append((child, path + (key,), sub))
        elif isinstance(value, (list, tuple)):
            stack.extend((child, path + (i,), model) for i, child in enumerate(value))
    return None


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "(top level)"
