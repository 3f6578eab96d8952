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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

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


Path = tuple[Any, ...]
"""Where a value sits in a loaded document: its keys and list indexes from the top."""


@dataclass(frozen=True)
class Marks:
    """Where each value of a loaded document starts in the text, so that a value refused
    after parsing can be named at its line. ``values`` maps a path (keys and list indexes from
    the top, ``()`` for the document) to the 1-based (line, column) its value starts at;
    ``keys`` maps a mapping entry's path to where its key starts."""

    values: Mapping[Path, tuple[int, int]] = field(default_factory=dict)
    keys: Mapping[Path, tuple[int, int]] = field(default_factory=dict)

    def line(self, *path: Any) -> int | None:
        """The line of the value at ``path``; for a path the document does not hold (a key
        that was left out), the line of the nearest enclosing value that it does."""
        for end in range(len(path), -1, -1):
            found = self.values.get(tuple(path[:end]))
            if found is not None:
                return found[0]
        return None

    def key_line(self, *path: Any) -> int | None:
        """The line of the key of the entry at ``path`` (or of its value)."""
        found = self.keys.get(tuple(path))
        return found[0] if found is not None else self.line(*path)


def _position(mark: Any) -> tuple[int, int]:
    return int(mark.line) + 1, int(mark.column) + 1


def _marks(loader: StrictSafeLoader, root: Node) -> Marks:
    """Walk the composed (and constructed, so merged) node tree beside its keys."""
    values: dict[Path, tuple[int, int]] = {}
    keys: dict[Path, tuple[int, int]] = {}
    stack: list[tuple[Path, Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        values[path] = _position(node.start_mark)
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                keys[(*path, key)] = _position(key_node.start_mark)
                stack.append(((*path, key), value_node))
        elif isinstance(node, SequenceNode):
            stack.extend(((*path, index), item) for index, item in enumerate(node.value))
    return Marks(values, keys)


def _where(text: str, exc: yaml.YAMLError) -> str | None:
    """'LINE:COLUMN' (1-based) of a parse error: the parser's mark, or for a byte the reader
    refuses (a NUL, say), its position in the text."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        line, column = _position(mark)
        return f"{line}:{column}"
    if isinstance(exc, ReaderError) and isinstance(exc.position, int):
        before = text[: exc.position]
        return f"{before.count(chr(10)) + 1}:{exc.position - before.rfind(chr(10))}"
    return None


def _reader_problem(exc: ReaderError) -> str:
    character = exc.character  # the code point (an int), or a str on some versions
    code = ord(character) if isinstance(character, str) else int(character)
    shown = f"U+{code:04X}"
    return f"invalid YAML: character {shown} is not allowed (a NUL or other control character)"


def undecodable_at(raw: bytes, exc: UnicodeDecodeError) -> str:
    """'LINE:COLUMN' (1-based; the column in characters) of the first byte that is not UTF-8."""
    start = raw.rfind(b"\n", 0, exc.start) + 1
    column = len(raw[start : exc.start].decode("utf-8", "replace")) + 1
    line = raw[: exc.start].count(b"\n") + 1
    return f"{line}:{column}"


def load_yaml(text: str, fail: Callable[[str | None, str], ReprobuildError]) -> Any:
    """Parse ``text`` with :class:`StrictSafeLoader`; ``fail(where, problem)`` builds the one
    error raised for anything malformed or refused, ``where`` being 'LINE' or 'LINE:COLUMN'
    (1-based) when the parser knows it."""
    return load_yaml_marked(text, fail)[0]


def load_yaml_marked(
    text: str, fail: Callable[[str | None, str], ReprobuildError]
) -> tuple[Any, Marks]:
    """:func:`load_yaml`, and where each value of the document is (:class:`Marks`)."""
    loader: StrictSafeLoader | None = None
    try:
        loader = StrictSafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, Marks()
        data = loader.construct_document(node)
        return data, _marks(loader, node)
    except RefusedYaml as exc:
        raise fail(None if exc.line is None else str(exc.line), exc.problem) from None
    except ConstructorError as exc:
        raise fail(_where(text, exc), f"invalid YAML: {exc.problem or 'cannot be read'}") from None
    except ReaderError as exc:
        raise fail(_where(text, exc), _reader_problem(exc)) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise fail(_where(text, exc), f"invalid YAML: {problem}") from None
    except RecursionError:
        raise fail(None, "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
