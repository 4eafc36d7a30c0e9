"""Read YAML safely and boundedly, remembering where every key and value sits in the file.

A config is untrusted input. It is read only from a regular file of at most `MAX_BYTES`, parsed once
(libyaml's C parser where installed) into plain values by the composer below, which also:

- caps nesting depth (`MAX_DEPTH`) and the number of values after alias expansion (`MAX_VALUES`), so a
  "billion laughs" alias bomb or thousands of nested brackets end as one error line, not a hang;
- reports duplicate keys with both lines (YAML keeps the last silently);
- builds only the safe loader's plain types (no object construction of any tag).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotrain.errors import ConfigError, ConfigIssue

Path_ = tuple[str | int, ...]

MAX_BYTES = 1 << 20  # 1 MiB: a config is a page of settings, not a data file
MAX_DEPTH = 32
MAX_VALUES = 100_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"
_COLLECTION_TAGS = {
    yaml.MappingStartEvent: ("tag:yaml.org,2002:map", "mapping"),
    yaml.SequenceStartEvent: ("tag:yaml.org,2002:seq", "list"),
}


class Locator:
    """Maps a field path such as ("training_args", "lr") to the line and column it came from."""

    def __init__(self, source: str, marks: dict[Path_, tuple[int, int]] | None = None):
        self.source = source
        self.marks = marks or {}
        # Paths set on the command line, reported as coming from `--set`.
        self.overridden: set[Path_] = set()
        # Paths renamed while translating another config format: native path -> original path.
        self.renamed: dict[Path_, Path_] = {}
        # Problems found while reading (duplicate keys), reported with the schema's.
        self.problems: list[ConfigIssue] = []

    def _by_text(self) -> dict[Path_, Path_]:
        """Marks by the text of their keys: pydantic names a key `~` (None) or `1` as "None", "1"."""
        if getattr(self, "_text_paths", None) is None:
            self._text_paths = {tuple(map(str, p)): p for p in self.marks}
        return self._text_paths

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        path = tuple(path)
        for n in range(len(path), -1, -1):
            prefix = path[:n]
            if prefix in self.overridden:
                return ConfigIssue(path, message, source="--set " + ".".join(map(str, prefix)))
            original = self.renamed.get(prefix, prefix)
            if original not in self.marks and n:
                original = self._by_text().get(tuple(map(str, original)), original)
            if original in self.marks:
                line, col = self.marks[original]
                return ConfigIssue(path, message, line, col, self.source)
            # A section that is not in the file was created by a `--set` below it.
            created = sorted(p for p in self.overridden if n and p[:n] == prefix)
            if created:
                return ConfigIssue(path, message, source="--set " + ".".join(map(str, created[0])))
        return ConfigIssue(path, message, source=self.source)


@dataclass
class _Open:
    """A mapping or list being built: its value, path, size so far, and (for mappings) the pending key."""

    value: dict | list
    path: Path_
    anchor: str | None
    size: int = 1
    key: Any = None
    has_key: bool = False
    key_lines: dict = field(default_factory=dict)
    merges: list = field(default_factory=list)


class _Composer:
    """Events -> plain Python values with marks, iteratively (no recursion, whatever the depth)."""

    def __init__(self, text: str, source: str):
        self.loader = _Loader(text)
        self.source = source
        self.marks: dict[Path_, tuple[int, int]] = {}
        self.duplicates: list[ConfigIssue] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.stack: list[_Open] = []
        self.total = 0
        self.root: Any = None

    def fail(self, event: yaml.Event, message: str) -> ConfigError:
        mark = event.start_mark
        return ConfigError([ConfigIssue(self._path(), message, mark.line + 1, mark.column + 1, self.source)])

    def _path(self) -> Path_:
        if not self.stack:
            return ()
        top = self.stack[-1]
        pending = isinstance(top.value, dict) and top.has_key and not isinstance(top.key, _MergeKey)
        return top.path + (top.key,) if pending else top.path

    def compose(self) -> Any:
        loader, documents = self.loader, 0
        try:
            while loader.check_event():
                event = loader.get_event()
                if isinstance(event, yaml.DocumentStartEvent):
                    documents += 1
                    if documents > 1:
                        raise self.fail(event, "a config holds one YAML document; found a second one (`---`)")
                elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                    self._open(event)
                elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                    self._close(event)
                elif isinstance(event, yaml.ScalarEvent):
                    self._add(event, self._scalar(event), 0 if self._awaits_key() else 1)
                elif isinstance(event, yaml.AliasEvent):
                    self._alias(event)
        finally:
            loader.dispose()
        return self.root

    def _awaits_key(self) -> bool:
        return bool(self.stack) and isinstance(self.stack[-1].value, dict) and not self.stack[-1].has_key

    def _child_path(self, event: yaml.Event) -> Path_ | None:
        """Where the next value goes; records its mark. None while a mapping waits for a key."""
        if not self.stack:
            mark = event.start_mark
            self.marks[()] = (mark.line + 1, mark.column + 1)
            return ()
        top = self.stack[-1]
        if isinstance(top.value, dict):
            return top.path + (top.key,) if top.has_key else None
        path = top.path + (len(top.value),)
        self.marks[path] = (event.start_mark.line + 1, event.start_mark.column + 1)
        return path

    def _open(self, event: yaml.Event) -> None:
        wanted, kind = _COLLECTION_TAGS[type(event)]
        if event.tag not in (None, "!", wanted):
            raise self.fail(event, f"YAML tag `{event.tag}` is not supported here; write a plain {kind}")
        top = self.stack[-1] if self.stack else None
        if top is not None and isinstance(top.value, dict) and not top.has_key:
            raise self.fail(event, "a key must be a plain value, not a list or a mapping")
        if len(self.stack) >= MAX_DEPTH:
            del self.stack[2:]  # name the section, not a path of MAX_DEPTH parts
            raise self.fail(event, f"nested more than {MAX_DEPTH} levels deep; a config is never this deep")
        path = self._child_path(event)
        value: dict | list = {} if isinstance(event, yaml.MappingStartEvent) else []
        self.stack.append(_Open(value, path, event.anchor))
        self._count(event, 1)

    def _close(self, event: yaml.Event) -> None:
        done = self.stack.pop()
        if done.merges:
            for merged in reversed(done.merges):
                for key, val in merged.items():
                    done.value.setdefault(key, val)
        if done.anchor:
            self.anchors[done.anchor] = (done.value, done.size)
        self._attach(event, done.value, done.size, counted=True)

    def _scalar(self, event: yaml.ScalarEvent) -> Any:
        tag = event.tag
        if tag in (None, "!"):
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _STR:
            return event.value
        if tag == _MERGE:
            return _MergeKey()
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        construct = self.loader.yaml_constructors.get(tag)
        if construct is None:
            raise self.fail(event, f"YAML tag `{tag}` is not supported; write a plain value")
        try:
            return construct(self.loader, node)
        except (yaml.YAMLError, ValueError, TypeError):
            raise self.fail(event, f"`{event.value}` is not a valid `{tag}`") from None

    def _alias(self, event: yaml.AliasEvent) -> None:
        if event.anchor not in self.anchors:
            if any(o.anchor == event.anchor for o in self.stack):
                raise self.fail(event, f"alias `*{event.anchor}` refers to the value that contains it")
            raise self.fail(event, f"alias `*{event.anchor}` has no anchor `&{event.anchor}` before it")
        value, size = self.anchors[event.anchor]
        self._count(event, size)
        self._add(event, value, size, counted=True)

    def _count(self, event: yaml.Event, size: int) -> None:
        self.total += size
        if self.total > MAX_VALUES:
            raise self.fail(
                event, f"the config expands to more than {MAX_VALUES} values (aliases repeating aliases?); refused"
            )

    def _add(self, event: yaml.Event, value: Any, size: int, counted: bool = False) -> None:
        if not counted:
            self._count(event, size)
        if isinstance(event, yaml.ScalarEvent) and event.anchor:
            self.anchors[event.anchor] = (value, size)
        self._attach(event, value, size, counted)

    def _attach(self, event: yaml.Event, value: Any, size: int, counted: bool) -> None:
        if not self.stack:
            self.root = value
            if isinstance(event, yaml.ScalarEvent):  # a bare scalar as the whole file: point at it
                self.marks[()] = (event.start_mark.line + 1, event.start_mark.column + 1)
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.value, list):
            if not isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                self._child_path(event)  # records the item's mark
            top.value.append(value)
        elif not top.has_key:
            self._take_key(event, top, value)
        else:
            if isinstance(top.key, _MergeKey):
                top.merges.extend(_merge_sources(value, self, event))
            else:
                top.value[top.key] = value
            top.has_key = False

    def _take_key(self, event: yaml.Event, top: _Open, key: Any) -> None:
        try:
            hash(key)
        except TypeError:
            raise self.fail(event, "a key must be a plain value") from None
        line, col = event.start_mark.line + 1, event.start_mark.column + 1
        if not isinstance(key, _MergeKey):
            if key in top.key_lines:
                first = top.key_lines[key]
                path = top.path + (key,)
                self.duplicates.append(
                    ConfigIssue(
                        path,
                        f"duplicate key `{key}` (lines {first} and {line}); YAML would silently keep only the "
                        "last: remove one",
                        line,
                        col,
                        self.source,
                    )
                )
            top.key_lines[key] = line
            self.marks[top.path + (key,)] = (line, col)
        top.key, top.has_key = key, True


class _MergeKey:
    """`<<:` in a mapping: the merged mappings fill keys the mapping does not set itself."""

    def __hash__(self) -> int:
        return id(self)


def _merge_sources(value: Any, composer: _Composer, event: yaml.Event) -> list[dict]:
    sources = value if isinstance(value, list) else [value]
    if not all(isinstance(s, dict) for s in sources):
        raise composer.fail(event, "`<<:` merges a mapping or a list of mappings")
    return sources


def _yaml_error(exc: yaml.YAMLError, source: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
    return ConfigError([ConfigIssue((), message, line, col, source)])


def parse_yaml(text: str, source: str) -> tuple[Any, Locator]:
    """Parse one YAML document (bounded, see the module doc); a problem is a ConfigError with its position."""
    if isinstance(text, str) and "\x00" in text:
        before = text[: text.index("\x00")]
        line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
        raise ConfigError([ConfigIssue((), "the file holds a NUL byte: it is not a text config", line, col, source)])
    composer = _Composer(text, source)
    try:
        data = composer.compose()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from None
    locator = Locator(source, composer.marks)
    locator.problems = composer.duplicates
    return data, locator


def parse_value(text: str, source: str) -> Any:
    """One `--set` value, read as YAML with the same bounds as a file; duplicate keys are errors here."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError([ConfigIssue((), f"value is larger than {MAX_BYTES // 1024} KiB", source=source)])
    data, locator = parse_yaml(text, source)
    if locator.problems:
        raise ConfigError(locator.problems)
    return data


def read_text(path: str | Path) -> str:
    """A config file's text: a regular file of at most MAX_BYTES of UTF-8 (ConfigError otherwise)."""
    path = Path(path)
    source = str(path)

    def refuse(message: str, line: int | None = None, col: int | None = None) -> ConfigError:
        return ConfigError([ConfigIssue((), message, line, col, source=source)])

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise refuse("config file not found") from None
    except OSError as exc:
        raise refuse(f"cannot read config: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, pipe or socket)"
        raise refuse(f"cannot read config: it is {kind}; give a YAML file")
    if info.st_size > MAX_BYTES:
        raise refuse(f"config file is {info.st_size / 2**20:.1f} MiB; a config may be at most 1 MiB")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot read config: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:  # grew since stat
        raise refuse("config file is larger than 1 MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line, col = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        raise refuse(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the config as UTF-8", line, col) from None


def read_yaml(path: str | Path) -> tuple[Any, Locator]:
    return parse_yaml(read_text(path), str(path))
