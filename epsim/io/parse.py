"""JSON and YAML parsing with bounds: nesting at most `MAX_DEPTH` levels, YAML aliases that
expand to at most `MAX_YAML_NODES` nodes (a "billion laughs" file is refused before anything
walks it), and duplicate YAML keys refused (PyYAML keeps the last one silently). Errors are
one line naming the file and the line.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from epsim.errors import EpsimError, SpecError
from epsim.io.files import MAX_TEXT_BYTES, read_text

MAX_DEPTH = 64            # a scenario is ~5 levels deep, a record or profile ~4
MAX_YAML_NODES = 200_000  # nodes after alias expansion; a scenario has ~100


class _Refused(yaml.YAMLError):
    """What the bounded loader refuses; carries the finished one-line reason."""


def _at(node_or_mark) -> str:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return f" at line {mark.line + 1}" if mark is not None else ""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with a nesting cap while composing, a cap on the nodes aliases expand to, and
    duplicate keys refused."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nesting must be at most {MAX_DEPTH} levels deep{_at(self.peek_event())}")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue                       # `<<: *base` then overriding keys is allowed
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:                  # unhashable key: SafeLoader says so below
                    continue
                if first is not key_node:
                    raise _Refused(f"key {_short(key)} appears twice{_at(key_node)} (first{_at(first)}); "
                                   f"each key must be given once")
        return super().construct_mapping(node, deep)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand beyond MAX_YAML_NODES nodes or MAX_DEPTH levels.

    Sizes are memoised per node, so the check costs the unexpanded size however large the
    expansion would be."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    # post-order without recursion: (node, children pushed?)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in size:
            continue
        children = _children(node)
        if not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        size[id(node)] = 1 + sum(size[id(c)] for c in children)
        depth[id(node)] = 1 + max((depth[id(c)] for c in children), default=0)
        if size[id(node)] > MAX_YAML_NODES:
            raise _Refused(f"aliases must expand to at most {MAX_YAML_NODES} nodes; the one"
                           f"{_at(node)} expands to more (an alias bomb?)")
        if depth[id(node)] > MAX_DEPTH:
            raise _Refused(f"nesting (with aliases expanded) must be at most {MAX_DEPTH} levels "
                           f"deep{_at(node)}")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, where: str, error: type[EpsimError] = SpecError) -> Any:
    """Parse YAML text within the bounds above.

    Raises:
        error: `<where>: not valid YAML at line L, column C: <problem>` or the bound refused.
    """
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 -- a SafeLoader subclass
    except _Refused as exc:
        raise error(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise error(f"{where}: not valid YAML{at}: {problem[:160]}") from None
    except RecursionError:                  # belt and braces: the depth cap comes first
        raise error(f"{where}: nesting must be at most {MAX_DEPTH} levels deep") from None
    except ValueError as exc:               # an integer of more than 4300 digits, a bad date
        raise error(f"{where}: not valid YAML: {str(exc).splitlines()[0][:120]}") from None


def loads_json(text: str, where: str, error: type[EpsimError] = SpecError,
               one_line: bool = False) -> Any:
    """Parse JSON text, nesting at most MAX_DEPTH levels. `NaN`/`Infinity` (which `json.dumps`
    writes) parse, so that the field check after it names the field (`epsim.spec.numbers`).

    Args:
        one_line: `text` is one line of a JSON Lines file (`where` names it): no "at line 1".
    Raises:
        error: `<where>: not valid JSON (<msg> at line L)` or the bound refused (one line).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        at = "" if one_line else f" at line {exc.lineno}"   # `where` names a JSONL line itself
        raise error(f"{where}: not valid JSON ({exc.msg}{at})") from None
    except RecursionError:
        raise error(f"{where}: nesting must be at most {MAX_DEPTH} levels deep") from None
    except ValueError as exc:               # an integer of more than 4300 digits
        raise error(f"{where}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    check_depth(data, where, error)
    return data


def load_json(path, what: str, error: type[EpsimError] = SpecError, max_bytes: int | None = None) -> Any:
    """Read (size-capped, UTF-8) and parse a JSON file."""
    text = read_text(path, what, max_bytes or MAX_TEXT_BYTES, error)
    return loads_json(text, str(path), error)


def check_depth(data: Any, where: str, error: type[EpsimError] = SpecError) -> None:
    """Refuse nested lists/dicts deeper than MAX_DEPTH (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if level > MAX_DEPTH:
            raise error(f"{where}: nesting must be at most {MAX_DEPTH} levels deep")
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
