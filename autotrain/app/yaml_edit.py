"""Set one value in YAML text and keep everything else (comments, order, layout) as it was.

The page's form changes one field at a time; rewriting the whole file from data would drop the
templates' comments. The value's node is found with PyYAML's composer and only its characters are
replaced; a key that is not there yet is added as a block under the nearest mapping that is.
"""

from __future__ import annotations

from typing import Any

import yaml

Path_ = list[str]


def _flow(value: Any) -> str:
    """`value` as one line of YAML (flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def _child(node: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == key:
                return key_node, value_node
    return None


def _walk(root: yaml.Node | None, path: Path_) -> tuple[yaml.Node | None, int, tuple | None]:
    """(deepest node reached, how many keys of path it covers, its (key, value) pair when found)."""
    node, depth, pair = root, 0, None
    for key in path:
        found = _child(node, key) if node is not None else None
        if found is None:
            break
        pair, node, depth = found, found[1], depth + 1
    return node, depth, pair


MAX_DEPTH = 64  # a config is never this deep; PyYAML's composer recurses once per level


def _compose(text: str) -> yaml.Node | None:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # events come without recursion
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_DEPTH:
            raise yaml.YAMLError(f"the YAML is nested too deeply (over {MAX_DEPTH} levels; a config never is)")
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None and not isinstance(root, yaml.MappingNode):
        raise yaml.YAMLError("a config must be a YAML mapping")
    return root


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and mappings (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def set_value(text: str, path: Path_, value: Any = None, unset: bool = False) -> str:
    """`text` with `path` set to `value` (or removed with `unset`); raises yaml.YAMLError on bad YAML, or on
    a path or value nested deeper than a config ever is (writing them would exhaust the YAML writer)."""
    if len(path) + _depth(value) > MAX_DEPTH:
        raise yaml.YAMLError(f"the path and value are nested too deeply (over {MAX_DEPTH} levels; a config never is)")
    root = _compose(text)
    node, depth, pair = _walk(root, path)
    if unset:
        return _unset(text, root, path) if depth == len(path) and pair is not None else text
    if depth == len(path) and pair is not None:
        return _replace(text, node, value)
    nested: Any = value
    for key in reversed(path[depth + 1 :]):
        nested = {key: nested}
    parent = node if depth else root
    if isinstance(parent, yaml.MappingNode) and not parent.flow_style and parent.value:
        return _insert(text, parent, {path[depth]: nested})
    if parent is None or depth == 0:
        return _append(text, {path[depth]: nested})
    # `key:` with no value, a scalar or a flow mapping: write the merged mapping in its place, on one line
    current = yaml.safe_load(text)
    for key in path[:depth]:
        current = current[key]
    merged = dict(current) if isinstance(current, dict) else {}
    merged[path[depth]] = nested
    return _replace(text, parent, merged)


def _unset(text: str, root: yaml.Node, path: Path_) -> str:
    """Remove `path`; a mapping left empty by it goes too (`optimizer_args:` alone would read as null,
    which no form field can repair)."""
    while len(path) > 1:
        parent, _, parent_pair = _walk(root, path[:-1])
        if not isinstance(parent, yaml.MappingNode) or len(parent.value) > 1:
            break
        path = path[:-1]  # the key is the mapping's only one: remove the mapping
    parent, _, _ = _walk(root, path[:-1])
    _, _, pair = _walk(root, path)
    if parent is not None and parent is not root and getattr(parent, "flow_style", False):
        current = yaml.safe_load(text)
        for key in path[:-1]:
            current = current[key]
        return _replace(text, parent, {k: v for k, v in current.items() if k != path[-1]})
    return _remove(text, pair)


def _replace(text: str, node: yaml.Node, value: Any) -> str:
    start, end = node.start_mark.index, node.end_mark.index
    if isinstance(node, yaml.ScalarNode) and node.value == "" and not node.style and start == end:
        # `key:` with nothing after it: the value goes after the colon
        return text[:start] + " " + _flow(value) + text[end:]
    tail = "\n" if end > start and text[end - 1] == "\n" else ""
    return text[:start] + _flow(value) + tail + text[end:]


def _remove(text: str, pair: tuple[yaml.Node, yaml.Node]) -> str:
    key_node, value_node = pair
    start = text.rfind("\n", 0, key_node.start_mark.index) + 1
    end = value_node.end_mark.index
    line_start = text.rfind("\n", 0, end) + 1
    if line_start and not text[line_start:end].strip():
        end = line_start  # a block value ends at the next key's indentation: keep that line whole
    if end == 0 or text[end - 1] != "\n":
        newline = text.find("\n", end)
        end = len(text) if newline < 0 else newline + 1
    return text[:start] + text[end:]


def _block(block: dict, indent: int) -> str:
    lines = yaml.safe_dump(block, sort_keys=False, default_flow_style=False).splitlines()
    return "".join(" " * indent + line + "\n" for line in lines)


def _append(text: str, block: dict) -> str:
    """Add a top-level key at the end of the document."""
    prefix = text if not text or text.endswith("\n") else text + "\n"
    return prefix + _block(block, 0)


def _insert(text: str, parent: yaml.MappingNode, block: dict) -> str:
    """Add `block` (one key) after the last entry of the block mapping `parent`, at its indentation."""
    indent = parent.value[0][0].start_mark.column
    last = parent.value[-1][1].end_mark
    newline = text.find("\n", last.index - 1 if last.column == 0 else last.index)
    at = len(text) if newline < 0 else newline + 1
    prefix = text[:at] if not at or text[at - 1] == "\n" else text[:at] + "\n"
    return prefix + _block(block, indent) + text[at:]
