"""Turn pydantic validation errors into the one-line messages epsim promises.

Every message reads `<where>: <field path> (<value>) must <rule>`, e.g.
`scenarios/h200.yaml: workload.skew.alpha (-1.0) must be > 0`.
"""

from __future__ import annotations

import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from epsim.errors import SpecError

M = TypeVar("M", bound=BaseModel)


def _fmt_value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(cls: type[BaseModel], loc: tuple) -> list[str] | None:
    """Field names of the model that `loc` (a path into `cls`) points inside."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def _model_in(annotation: Any) -> Any:
    """The BaseModel inside an annotation (Optional[X], list[X], X), else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


_RULES = {
    "greater_than": lambda c: f"must be > {c['gt']}",
    "greater_than_equal": lambda c: f"must be >= {c['ge']}",
    "less_than": lambda c: f"must be < {c['lt']}",
    "less_than_equal": lambda c: f"must be <= {c['le']}",
    "literal_error": lambda c: f"must be one of {c['expected']}",
    "enum": lambda c: f"must be one of {c['expected']}",
    "int_parsing": lambda c: "must be an integer",
    "int_type": lambda c: "must be an integer",
    "int_from_float": lambda c: "must be a whole number",
    "float_parsing": lambda c: "must be a number",
    "float_type": lambda c: "must be a number",
    "finite_number": lambda c: "must be a finite number",
    "bool_parsing": lambda c: "must be true or false",
    "bool_type": lambda c: "must be true or false",
    "string_type": lambda c: "must be a string",
    "string_too_short": lambda c: f"must have at least {c['min_length']} character(s)",
    "list_type": lambda c: "must be a list",
    "too_short": lambda c: f"must have at least {c['min_length']} item(s)",
    "too_long": lambda c: f"must have at most {c['max_length']} item(s)",
    "dict_type": lambda c: "must be a mapping",
    "model_type": lambda c: "must be a mapping",
    "model_attributes_type": lambda c: "must be a mapping",
    "union_tag_invalid": lambda c: f"must be one of {c['expected_tags']}",
    "union_tag_not_found": lambda c: f"must have a '{c['discriminator']}' field",
}


def format_error(err: dict, cls: type[BaseModel], where: str) -> str:
    """One line for one pydantic error dict."""
    loc = tuple(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    path = ".".join(str(p) for p in loc) or "(top level)"
    if kind == "missing":
        return f"{where}: {path} (missing) must be given"
    if kind == "extra_forbidden":
        allowed = _fields_at(cls, loc[:-1])
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{where}: {path} ({_fmt_value(err['input'])}) is not a known field{hint}"
    if kind == "union_tag_invalid":
        path = ".".join(str(p) for p in loc + (ctx.get("discriminator", "kind").strip("'"),))
        value = ctx.get("tag")
        return f"{where}: {path} ({_fmt_value(value)}) {_RULES[kind](ctx)}"
    value = err.get("input")
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        # our validators already say `name (value) must ...`; put the path in front
        if loc:
            return f"{where}: {path}: {msg}"
        return f"{where}: {msg}"
    rule = _RULES.get(kind)
    text = rule(ctx) if rule else f"is invalid: {err['msg']}"
    return f"{where}: {path} ({_fmt_value(value)}) {text}"


def validate(cls: type[M], data: Any, where: str, context: dict | None = None) -> M:
    """`cls.model_validate(data)`, raising SpecError with the first error as one line.

    Raises:
        SpecError: `<where>: <path> (<value>) must <rule>` (further errors counted).
    """
    try:
        return cls.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors()
        line = format_error(errors[0], cls, where)
        if len(errors) > 1:
            line += f" (and {len(errors) - 1} more error(s))"
        raise SpecError(line) from None
