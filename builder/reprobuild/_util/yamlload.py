"""The one YAML loader every file the product reads goes through (reprobuild.yaml, catalogs).

``yaml.safe_load`` is safe from code execution but not from surprises. This loader refuses:

* aliases and anchors (``&a`` / ``*a``): nested aliases expand exponentially ("billion
  laughs") and nothing reprobuild reads needs them;
* a key given twice in one mapping (PyYAML silently keeps the last one);
* integers that are not plain decimal: ``010`` (YAML 1.1 octal, 8), ``0x10``, ``1_000`` and
  sexagesimal ``1:30`` (90) all read as something other than what was typed.

And it reads only ``true``/``false`` as booleans: ``off``, ``on``, ``yes``, ``no``, ``y`` and
``n`` stay strings (so ``determinism: off`` means the mode "off", as the README says).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode

from reprobuild.errors import ReprobuildError, shorten

_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_PLAIN_INT_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")


class RefusedYaml(yaml.YAMLError):
    """YAML that parses but that this loader will not read; carries the line (1-based)."""

    def __init__(self, line: int | None, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


def _line(item: Any) -> int | None:
    mark = getattr(item, "start_mark", None)
    return None if mark is None else int(mark.line) + 1


class StrictSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the refusals described in the module docstring."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise RefusedYaml(
                _line(event),
                f"alias *{shorten(event.anchor, 40)[1:-1]} is not allowed: write the value out",
            )
        if isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None:
            raise RefusedYaml(
                _line(event),
                f"anchor &{shorten(event.anchor, 40)[1:-1]} is not allowed: write values out",
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if not isinstance(key_node, ScalarNode):
                raise RefusedYaml(key_node.start_mark.line + 1, "a key must be a plain value")
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise RefusedYaml(
                    key_node.start_mark.line + 1, "a key must be a plain value"
                ) from None
            if duplicate:
                raise RefusedYaml(
                    key_node.start_mark.line + 1,
                    f"key {shorten(key, 60)} is given twice in the same mapping",
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if not _PLAIN_INT_RE.fullmatch(text):
            raise RefusedYaml(
                node.start_mark.line + 1,
                f"number {shorten(text, 40)} is not a plain decimal integer (YAML would read "
                "a leading 0 as octal, 0x as hex, '1:30' as 90): write digits without a "
                "leading zero, or quote it for a string",
            )
        return int(text)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        if ":" in text or "_" in text:
            raise RefusedYaml(
                node.start_mark.line + 1,
                f"number {shorten(text, 40)} is not a plain decimal number "
                "(no ':' or '_'): quote it for a string",
            )
        return float(super().construct_yaml_float(node))


# Only true/false (any case YAML spells them) are booleans; yes/no/on/off/y/n are strings.
StrictSafeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictSafeLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
StrictSafeLoader.add_constructor(_INT_TAG, StrictSafeLoader.construct_yaml_int)
StrictSafeLoader.add_constructor(_FLOAT_TAG, StrictSafeLoader.construct_yaml_float)


def load_yaml(text: str, fail: Callable[[int | None, str], ReprobuildError]) -> Any:
    """Parse ``text`` with :class:`StrictSafeLoader`; ``fail(line, problem)`` builds the one
    error raised for anything malformed or refused."""
    try:
        return yaml.load(text, Loader=StrictSafeLoader)
    except RefusedYaml as exc:
        raise fail(exc.line, exc.problem) from None
    except ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise fail(line, f"invalid YAML: {exc.problem or 'cannot be read'}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise fail(line, f"invalid YAML: {problem}") from None
    except RecursionError:
        raise fail(None, "invalid YAML: nested too deeply") from None
