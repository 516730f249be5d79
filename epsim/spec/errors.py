"""Turn pydantic validation errors into the one-line messages epsim promises.

Every message reads `<where>: <field path> (<value>) must <rule>`, e.g.
`scenarios/h200.yaml: workload.skew.alpha (-1.0) must be > 0`.
"""

from __future__ import annotations

import re
import reprlib
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from epsim.errors import SpecError, did_you_mean
from epsim.spec.numbers import check_numbers

M = TypeVar("M", bound=BaseModel)


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 2, 4, 3, 50, 50
    return short


_SHORT = _short_repr()


def _fmt_value(value: Any) -> str:
    """At most ~60 characters of a value, built without expanding it (a YAML alias bomb is a
    list of lists a billion items long: `str()` of it would never finish)."""
    text = _SHORT.repr(value) if isinstance(value, (str, list, tuple, dict, set)) else str(value)[:80]
    return text if len(text) <= 60 else text[:57] + "..."


def _walk(cls: type[BaseModel], loc: tuple) -> tuple[tuple, list[type[BaseModel]]]:
    """Follow a raw pydantic path into `cls`: (the path without the discriminator tags
    pydantic puts into tagged unions, the models the path ends inside)."""
    out = []
    members: list[type[BaseModel]] = [cls]
    for part in loc:
        if isinstance(part, str) and len(members) > 1:
            tagged = [m for m in members if _tag_of(m) == part]
            if tagged:
                members = tagged
                continue
        out.append(part)
        if isinstance(part, int):
            continue
        if len(members) == 1 and part in members[0].model_fields:
            members = models_in(members[0].model_fields[part].annotation)
        else:
            members = []
    return tuple(out), members


def _fields_at(cls: type[BaseModel], loc: tuple) -> list[str] | None:
    """Field names of the model that `loc` (a raw pydantic path into `cls`) points inside."""
    members = _walk(cls, loc)[1]
    return sorted(members[0].model_fields) if len(members) == 1 else None


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every BaseModel an annotation may hold (X, Optional[X], list[X], a union of models)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += [m for m in models_in(arg) if m not in found]
    return found


def _tag_of(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("kind")
    return field.default if field is not None else None


_LEADING_NAME = re.compile(r"^([A-Za-z_]\w*)(?:\.[\w.]+)? \(")


def _value_error_line(where: str, loc: tuple, msg: str) -> str:
    """Our validators say `name (value) must ...` about a field of the model at `loc`; put the
    path in front once: `deployment.failures.0.rank (9) must ...`."""
    if not loc:
        return f"{where}: {msg}"
    path = ".".join(str(p) for p in loc)
    match = _LEADING_NAME.match(msg)
    if match is None:
        return f"{where}: {path}: {msg}"
    if match.group(1) == str(loc[-1]):          # a field validator naming its own field
        parent = ".".join(str(p) for p in loc[:-1])
        return f"{where}: {parent + '.' if parent else ''}{msg}"
    return f"{where}: {path}.{msg}"


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
    raw_loc = tuple(err["loc"])
    loc = _walk(cls, raw_loc)[0]           # `workload.skew.zipf.alpha` -> `workload.skew.alpha`
    kind = err["type"]
    ctx = err.get("ctx") or {}
    path = ".".join(str(p) for p in loc) or "(top level)"
    if kind == "missing":
        return f"{where}: {path} (missing) must be given"
    if kind == "extra_forbidden":
        allowed = _fields_at(cls, raw_loc[:-1])
        guess = did_you_mean(raw_loc[-1], allowed)
        hint = f"; {guess + ' ' if guess else ''}allowed: {', '.join(allowed)}" if allowed else ""
        return f"{where}: {path} ({_fmt_value(err['input'])}) is not a known field{hint}"
    if kind == "union_tag_invalid":
        path = ".".join(str(p) for p in loc + (ctx.get("discriminator", "kind").strip("'"),))
        value = ctx.get("tag")
        return f"{where}: {path} ({_fmt_value(value)}) {_RULES[kind](ctx)}"
    value = err.get("input")
    if kind == "value_error":
        return _value_error_line(where, loc, str(ctx.get("error", err["msg"])))
    rule = _RULES.get(kind)
    text = rule(ctx) if rule else f"is invalid: {err['msg']}"
    return f"{where}: {path} ({_fmt_value(value)}) {text}"


def validate(cls: type[M], data: Any, where: str, context: dict | None = None) -> M:
    """`cls.model_validate(data)`, raising SpecError with the first error as one line.

    Numbers are checked first (`epsim.spec.numbers`): finite, bounded, no bool for a number.

    Raises:
        SpecError: `<where>: <path> (<value>) must <rule>` (further errors counted).
    """
    bad = check_numbers(data, cls)
    if bad is not None:
        raise SpecError(f"{where}: {bad[0]} {bad[1]}")
    try:
        return cls.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors()
        line = format_error(errors[0], cls, where)
        if len(errors) > 1:
            line += f" (and {len(errors) - 1} more error(s))"
        raise SpecError(line) from None
