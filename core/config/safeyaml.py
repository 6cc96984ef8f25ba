"""The one way gpu-router reads YAML: `gpu.yaml` and the user's config both come through here.

`yaml.safe_load` refuses to run code, but not to spend the machine: a 1 KB "billion laughs"
file of nested aliases expands to gigabytes, args nested thousands deep end in a
RecursionError, a FIFO named gpu.yaml blocks forever, and a 5000-digit `1:2:3:...` number
takes minutes to build. Here every document is held to limits while it is composed, before a
single Python object is built:

- the file: a regular file of at most `MAX_BYTES`, UTF-8;
- nesting: at most `MAX_DEPTH` levels, counted with aliases expanded;
- size: at most `MAX_NODES` values and `MAX_CHARS` characters of scalars, aliases expanded,
  so an alias costs what it stands for and a bomb stops at its first few levels;
- an alias may not refer to the value that contains it (a cycle);
- numbers of more than `MAX_NUMBER_CHARS` characters are refused.

Every problem, including anything PyYAML itself raises while building values, becomes a
`UserError` naming the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, ScalarEvent

from core.config.yamlfile import MAX_BYTES, read_text  # noqa: F401 - read_text: the one safe read, here too
from core.errors import UserError

MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_CHARS = MAX_BYTES
MAX_NUMBER_CHARS = 64

_SYNTAX_FIX = "check indentation and quoting"


class _TooBig(yaml.YAMLError):
    """A limit of this module, raised while composing: what was exceeded and where."""

    def __init__(self, what: str, fix: str, mark: Any) -> None:
        super().__init__(what)
        self.what, self.fix, self.mark = what, fix, mark


def _int_with_bounds(loader: SafeConstructor, node: yaml.ScalarNode) -> int:
    """PyYAML's int, refused when it is so long that building it would take minutes."""
    if len(node.value) > MAX_NUMBER_CHARS:
        raise ConstructorError(None, None, f"a number of {len(node.value)} characters is too long "
                               f"(at most {MAX_NUMBER_CHARS})", node.start_mark)
    return SafeConstructor.construct_yaml_int(loader, node)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts what each node expands to and stops at the limits."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0  # the depth of the node being composed (its parent's, while deciding)
        self._reach = 0  # the deepest level reached under the node being composed
        self._nodes = 0
        self._chars = 0
        self._open: set[str] = set()  # anchors whose node is still being composed
        self._sizes: dict[str, tuple[int, int, int]] = {}  # anchor -> (nodes, chars, height)

    def compose_document(self) -> Any:
        node = super().compose_document()
        self._sizes = {}
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._add_alias(event)
            return super().compose_node(parent, index)
        self._depth += 1
        saved_reach, self._reach = self._reach, self._depth
        before = (self._nodes, self._chars)
        if self._depth > MAX_DEPTH:
            self._too_deep(event.start_mark)
        if event.anchor is not None:
            self._open.add(event.anchor)
        self._count(1, len(event.value) if isinstance(event, ScalarEvent) else 0, event.start_mark)
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._open.discard(event.anchor)
            self._sizes[event.anchor] = (self._nodes - before[0], self._chars - before[1],
                                         self._reach - self._depth + 1)
        self._depth -= 1
        self._reach = max(saved_reach, self._reach)
        return node

    def _add_alias(self, event: AliasEvent) -> None:
        """An alias costs the nodes, characters and depth of the value it stands for."""
        anchor = event.anchor
        if anchor in self._open:
            raise _TooBig(f"the alias *{anchor} refers to the value that contains it",
                          "an alias may only repeat a value defined before it, not its own parent",
                          event.start_mark)
        if anchor not in self._sizes:
            return  # PyYAML reports the undefined alias
        nodes, chars, height = self._sizes[anchor]
        reach = self._depth + height
        if reach > MAX_DEPTH:
            self._too_deep(event.start_mark)
        self._reach = max(self._reach, reach)
        self._count(nodes, chars, event.start_mark)

    def _count(self, nodes: int, chars: int, mark: Any) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES or self._chars > MAX_CHARS:
            raise _TooBig(f"expands to more than {MAX_NODES} values or {MAX_CHARS} characters "
                          "(aliases counted as what they repeat)",
                          "write the settings out plainly; a config this large is a mistake",
                          mark)

    @staticmethod
    def _too_deep(mark: Any) -> None:
        raise _TooBig(f"nested more than {MAX_DEPTH} levels deep (aliases counted as what they repeat)",
                      "flatten it: settings are at most a few levels deep", mark)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _int_with_bounds)


def compose(text: str, source: str) -> yaml.Node | None:
    """The document's root node, composed under the limits (None: empty or only comments)."""
    try:
        loader = _BoundedLoader(text)  # its reader already refuses NUL and other controls
    except yaml.YAMLError as exc:
        raise _user_error(exc, source) from None
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise _user_error(exc, source) from None
    finally:
        loader.dispose()
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
        return None
    return node


def construct(node: yaml.Node, source: str) -> Any:
    """The Python value of a node from `compose` (bounded, so building it is cheap)."""
    loader = _BoundedLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise _user_error(exc, source) from None
    except Exception as exc:  # PyYAML lets ValueError etc. out, e.g. for a 2001-13-45 date
        raise UserError(f"not valid YAML: {exc}", where=f"{source}:{node.start_mark.line + 1}",
                        fix=_SYNTAX_FIX) from None
    finally:
        loader.dispose()


def load(text: str, source: str) -> Any:
    """The whole document as Python values (None when it is empty)."""
    node = compose(text, source)
    return None if node is None else construct(node, source)


def load_file(path: Path) -> Any:
    """`load` of a file's text; None when the file does not exist or is empty."""
    text = read_text(path)
    return None if text is None else load(text, str(path))


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _user_error(exc: yaml.YAMLError, source: str) -> UserError:
    if isinstance(exc, _TooBig):
        return UserError(exc.what, where=f"{source}:{exc.mark.line + 1}", fix=exc.fix)
    mark = getattr(exc, "problem_mark", None)
    where = f"{source}:{mark.line + 1}" if mark else source
    return UserError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", where=where,
                     fix=_SYNTAX_FIX)
