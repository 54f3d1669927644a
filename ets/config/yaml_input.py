"""YAML as a config's user means it: a config file's text and each `key=value` override.

PyYAML reads YAML 1.1, whose rules misread what a user writes: `010` is 8 (octal), `1:30`
is 90 (base 60), `2024-07-26` a date (which no config value is, and the JSON that records a
run's config cannot hold), `1e-6` text. Here, as in YAML 1.2 and Python, a number is
decimal (or `0x` hex, `0o` octal) and `1e-6` a float; the rest is text (true/false,
yes/no, on/off and null are as YAML 1.1 has them).

What is refused, with the line it is on (`RefusedYAML`):
- a key given twice in one mapping (PyYAML keeps the last one, silently);
- an alias inside the value of its own anchor (`a: &a [*a]`: a value that contains itself);
- a document holding more than MAX_VALUES values once its aliases are expanded: aliases of
  aliases multiply ("billion laughs"), and a config is written out, stored and compared
  in full;
- values nested more than MAX_DEPTH deep;
- a value of a kind a config does not hold (`!!binary`, `!!set`, `!!timestamp`, ...).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_VALUES = 100_000
MAX_DEPTH = 100

_TAG = "tag:yaml.org,2002:"
# What a config holds: what JSON can write (a run records its config as JSON).
_VALUE_TAGS = {_TAG + kind for kind in ("str", "int", "float", "bool", "null", "seq", "map", "merge")}
# Tags whose text must read as their kind (an explicit `!!int abc` is refused here).
_SCALAR_TAGS = {_TAG + "int": "an integer", _TAG + "float": "a number", _TAG + "bool": "true or false",
                _TAG + "null": "null"}


class RefusedYAML(yaml.MarkedYAMLError):
    """Valid YAML, or nearly, that a config may not be: the module doc says which."""

    def __init__(self, problem: str, node: Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with the plain-scalar rules of the module doc."""

    yaml_implicit_resolvers: dict = {}


for _kind, _pattern, _first in (
    ("bool", r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF", "yYnNtTfFoO"),
    ("int", r"[-+]?[0-9][0-9_]*|[-+]?0x[0-9a-fA-F_]+|[-+]?0o[0-7_]+", "-+0123456789"),
    ("float", r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
              r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+0123456789."),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("merge", r"<<", "<"),
):
    _Loader.add_implicit_resolver(_TAG + _kind, re.compile(f"^(?:{_pattern})$"), list(_first))


def _construct_int(loader: _Loader, node: ScalarNode) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    if len(text) > 100:  # Python converts no more than 4300 digits, and no config value needs 20
        raise RefusedYAML(f"the number {text[:20]}... has {len(text):,} digits", node)
    return int(text, 0 if text.lstrip("+-")[:2] in ("0x", "0o") else 10)  # 010 is ten, not eight


_Loader.add_constructor(_TAG + "int", _construct_int)


def read_yaml(text: str) -> Any:
    """The value `text` holds, read as the module doc says. yaml.YAMLError for text that
    is not YAML or is refused: a MarkedYAMLError (RefusedYAML among them) says where."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(loader, node)
        return loader.construct_document(node)
    except RecursionError:  # PyYAML composes nested values recursively
        raise yaml.YAMLError(f"values nested more than {MAX_DEPTH} deep") from None
    finally:
        loader.dispose()


def _check(loader: _Loader, root: Node) -> None:
    """Refuse what the module doc lists, on the composed nodes: an alias is the very node
    of its anchor, so each node is sized once and a loop is a node met inside itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise RefusedYAML("an alias inside the value of its own anchor: a value cannot contain itself", node)
        if depth > MAX_DEPTH:
            raise RefusedYAML(f"values nested more than {MAX_DEPTH} deep", node)
        if node.tag not in _VALUE_TAGS:
            raise RefusedYAML(f"a value tagged {node.tag}; a config holds text, numbers, true/false, null, lists "
                              f"and mappings", node)
        if node.tag in _SCALAR_TAGS and not _reads_as_tagged(loader, node):
            raise RefusedYAML(f"{node.value!r} is not {_SCALAR_TAGS[node.tag]}", node)  # e.g. `!!int abc`
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            _no_key_twice(loader, node)
            children = [part for pair in node.value for part in pair]
        open_nodes.add(id(node))
        total = 1 + sum(size(child, depth + 1) for child in children)
        open_nodes.discard(id(node))
        if total > MAX_VALUES:
            raise RefusedYAML(f"this value holds more than {MAX_VALUES:,} values once its aliases are expanded "
                              f"(each alias of an alias multiplies them); write the values out", node)
        sizes[id(node)] = total
        return total

    size(root, 0)


def _reads_as_tagged(loader: _Loader, node: ScalarNode) -> bool:
    """Whether the text of an (explicitly) tagged scalar reads as its tag says: an integer
    is a number too (`!!float 5`)."""
    resolved = loader.resolve(ScalarNode, node.value, (True, False))
    return resolved == node.tag or (node.tag == _TAG + "float" and resolved == _TAG + "int")


def _no_key_twice(loader: _Loader, node: MappingNode) -> None:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _TAG + "merge":
            continue  # a merge (<<) may be overridden by the keys beside it: that is its use
        key = loader.construct_object(key_node)
        if key in first_line:
            raise RefusedYAML(f"key {key!r} is given twice (first on line {first_line[key]}); keep one", key_node)
        first_line[key] = key_node.start_mark.line + 1


# The fix for what PyYAML's problems most often mean.
_FIXES = {
    "'\\t'": "; indent with spaces (YAML allows no tabs there)",
    "mapping values are not allowed here": "; a key is indented more than the one above it, or a value holds ': ' "
                                           "and needs quotes",
}


def problem(exc: yaml.YAMLError, where: bool = True) -> str:
    """A YAML error as one short phrase: where (line and column, with `where`), what, and
    for a tab the fix; without PyYAML's echo of the text."""
    if isinstance(exc, yaml.reader.ReaderError):
        return (f"{'position ' + str(exc.position) + ': ' if where else ''}character #x{exc.character:04x} "
                f"is not allowed in YAML ({exc.reason})")
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)
    mark = exc.problem_mark or exc.context_mark
    text = " ".join(part for part in (exc.context, exc.problem) if part)
    text += next((fix for words, fix in _FIXES.items() if words in text), "")
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}" if where and mark else text
