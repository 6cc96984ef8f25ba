"""What the `gpu` command and the dashboard show: the one filter for text gpu-router did not
write itself, the one way to style it, and the only places that write to the terminal.

Why: a job's output and arguments, a path, a target's name, a remote host's reply, or a config
value echoed in an error can carry terminal escapes (OSC 52 writes the clipboard, OSC 0 the
window title, CSI 2J clears the screen, 0x9b is CSI in one byte), bidi overrides that reorder
what a person reads before approving, and Rich markup (`[link=...]`) that Rich would obey.
So, in tui/:

- `safe(value)` is the one function every such piece of text passes: core.runtime.textsafe's
  `printable` (the launcher's filter too), for any value;
- styled output is built by `markup(template, **values)`: the template is gpu-router's own
  markup, each value passes `safe` and enters the result as plain text that no markup parser
  ever reads. The result is a rich `Text`, which neither the console nor a Textual widget
  parses again, so no escaping scheme (and none of its backslash corner cases) is involved;
- the sinks here (`say`, `write`, `error`, `ask`, `ask_hidden`, `emit_json`) are the only
  code in tui/ that writes to the terminal (tests/tui/show/test_terminal_output.py checks it). They take
  `Text` and renderables made of it; a plain `str` handed to them is untrusted and filtered.
"""

from __future__ import annotations

import json
import os
import string
import sys
from types import TracebackType
from typing import IO, Any, Self

from core.display.sanitize import printable_doc
from core.runtime.textsafe import printable

_FIELD = "\ue000"  # stands for a value while the template's markup is parsed: private use


def safe(value: object, *, single_line: bool = False) -> str:
    """`value` as text a terminal only displays: printable characters, tab and newline."""
    if not isinstance(value, (str, bytes)):
        value = str(value)
    return printable(value, single_line=single_line)


def markup(template: str, /, **values: object) -> Any:
    """gpu-router's own Rich markup with `{name}` fields filled by filtered, inert values.

    A value that is already a `Text` (made here, e.g. a styled state) keeps its styles; any
    other is formatted with the field's spec, then passed through `safe`. Literal brackets
    in a template are written `\\[` as in any Rich markup.
    """
    from rich.text import Text

    formatter = string.Formatter()
    skeleton: list[str] = []
    fields: list[Text] = []
    for literal, name, spec, conversion in formatter.parse(template):
        assert _FIELD not in literal, "a template cannot hold U+E000"
        skeleton.append(literal)
        if name is None:
            continue
        value = formatter.get_field(name, (), values)[0]
        if conversion:
            value = formatter.convert_field(value, conversion)
        if isinstance(value, Text) and not spec:
            fields.append(value.copy())
        else:
            fields.append(Text(safe(format(value, spec or ""))))
        skeleton.append(_FIELD)
    return _fill(Text.from_markup("".join(skeleton), emoji=False), fields)


def _fill(skeleton: Any, fields: list) -> Any:
    """Put each field's text where its placeholder was: a style that covered the placeholder
    covers the whole value (one span, as if the value had been in the template), and the
    value's own styles come on top."""
    from rich.text import Span

    parts = skeleton.plain.split(_FIELD)
    starts: list[int] = []  # where each field begins in the result
    shifts: list[tuple[int, int]] = []  # (placeholder index in skeleton, growth after it)
    at, grown = 0, 0
    for part, field in zip(parts, fields):
        at += len(part)
        starts.append(at + grown)
        grown += len(field) - 1
        shifts.append((at, grown))
        at += 1

    def moved(index: int) -> int:
        return index + next((g for p, g in reversed(shifts) if p < index), 0)

    out = skeleton.blank_copy("".join(p + f.plain for p, f in zip(parts, fields)) + parts[-1])
    spans = [Span(moved(s.start), moved(s.end), s.style) for s in skeleton.spans]
    for field, start in zip(fields, starts):
        if field.style:
            spans.append(Span(start, start + len(field), field.style))
        spans += [Span(s.start + start, s.end + start, s.style) for s in field.spans]
    out.spans = [s for s in spans if s.end > s.start]
    return out


def joined(items: Any, sep: str = " ") -> str:
    """Values shown side by side (a command's args, env pairs): each is filtered on its own,
    so one that opens a sequence and never ends it hides nothing but itself (a whole-line
    filter would drop the args after it from the plan a person approves)."""
    return sep.join(safe(item, single_line=True) for item in items)


def renderable(value: object) -> Any:
    """A table cell or a line of a group: our renderables as they are, anything else filtered.

    Rich (and Textual, which renders these) would parse a plain str as markup, so a str never
    reaches them: it becomes an inert Text.
    """
    from rich.protocol import is_renderable
    from rich.text import Text

    if isinstance(value, Text) or (is_renderable(value) and not isinstance(value, str)):
        return value
    return Text(safe(value))


PIPED_WIDTH = 1000  # a table's width when stdout is a pipe or a file: whole rows, never cut


def console():
    """The one console: no markup, emoji codes or highlighting applied to anything printed.

    Piped or redirected (`gpu jobs | grep`, `gpu targets > t.txt`), Rich would lay tables out
    for 80 columns and drop or cut whole columns (NAME, KIND, GPU); a pipe has no width, so
    rows are laid out whole, and a line of text is not wrapped (a path cut in two is no path to
    copy). COLUMNS, where set, still wins: tables and text are laid out for it.
    """
    from rich.console import Console

    width = None
    unbounded = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    if unbounded:
        width = PIPED_WIDTH
    return Console(highlight=False, soft_wrap=unbounded, markup=False, emoji=False, width=width)


def say(value: object) -> None:
    """Print a line (Text or a renderable made here; anything else is filtered) to stdout."""
    console().print(renderable(value))


def write(text: str | bytes, file: IO[str] | None = None) -> None:
    """Write text as it is, filtered, with no styling or wrapping: logs, argparse's messages."""
    out = file or sys.stdout
    out.write(safe(text))
    out.flush()


def error(message: object) -> None:
    """An error line on stderr: `error: ...`, filtered (it often echoes what a user typed)."""
    write(f"error: {safe(message)}\n", sys.stderr)


def ask(prompt: Any) -> str:
    """A question answered on the terminal; the prompt is markup() Text or filtered."""
    return console().input(renderable(prompt))


def ask_hidden(prompt: object) -> str:
    """A hidden answer (a secret's value); getpass writes the prompt itself, so it is filtered."""
    import getpass

    return getpass.getpass(safe(prompt, single_line=True))


class Packing:
    """What a submit, plan or bundle is doing while it lists, hashes and packs the project:
    a progress bar on stderr when stderr is a terminal (never in --json output, which is an
    agent's, nor in MCP's, which has its own progress notifications), the listing's warnings
    before anything is packed, and, on Ctrl-C, what was left undone."""

    def __init__(self, bar: bool) -> None:
        self.last = "listing the files that ship"
        self.bar = bar and _isatty(sys.stderr)
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Self:
        if self.bar:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            con = Console(stderr=True, highlight=False, markup=False, emoji=False)
            self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(), console=con,
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.last, total=None)
        return self

    def stage(self, done: int, total: int | None, text: str) -> None:
        """core.engine.service's Stage: how far the bundling is."""
        self.last = safe(text, single_line=True)
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total, description=self.last,
                                  refresh=True)  # every 100 files: each step is seen

    def warn(self, text: str) -> None:
        """A listing warning, said before the packing starts (above the bar)."""
        line = f"warning: {safe(text, single_line=True)}\n"
        if self._progress is not None:
            self._progress.console.print(renderable(line.rstrip("\n")))
        else:
            write(line, sys.stderr)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
        if kind is KeyboardInterrupt:
            if self.last.startswith(("listing", "bundling", "hashing")):
                done = "nothing was submitted and no partial bundle was kept"
            else:
                done = "the project was bundled; if the job was recorded, `gpu jobs` lists it"
            error(f"interrupted while {self.last}: {done}")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream) and stream.isatty()
    except (ValueError, OSError):
        return False


def json_text(doc: Any, *, indent: int | None = 2) -> str:
    """Machine output as text: every string through `printable_doc` (no invisible or control
    character reaches the reader, not even escaped); ensure_ascii writes every non-ASCII or control character as
    \\uXXXX, so a U+009B, a bidi override or an ESC in a job's name is inert in a terminal
    too (and in whatever an MCP client shows of a tool's result)."""
    return json.dumps(printable_doc(doc), indent=indent, default=str, ensure_ascii=True)


def emit_json(doc: Any) -> None:
    """Machine output on stdout (see `json_text`)."""
    sys.stdout.write(json_text(doc) + "\n")
    sys.stdout.flush()
