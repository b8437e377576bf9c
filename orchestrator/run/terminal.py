"""Box output made safe for a terminal, for `orch run`'s live stream and `orch logs`.

A job controls every byte it prints. Written raw to a terminal, an escape sequence can set
the window title (OSC), clear the screen, move the cursor over orch's own report, or a line
can pretend to be orch's (`orch: run ... exit 0`). When orch's output is a terminal, box
text goes through `TerminalSink`:

- every C0/C1 control, DEL, format character (bidi overrides) and lone surrogate is shown as
  a visible escape (`\\x1b`), as `orch check` does (orchestrator/check/untrusted.py), except
  newline, tab and carriage return;
- a box line (after a newline or a carriage return) that starts with `orch:` is shown as
  `[box] orch:`, so every line on the terminal that starts with `orch:` is orch's own.

Bytes that are not UTF-8 are shown as U+FFFD. When the output is not a terminal (a pipe, a
file, CI logs), the box's bytes pass unchanged: `orch logs NAME > file` is the exact log,
and orch's own verdict is its exit status and `--json` report.
"""

from __future__ import annotations

import codecs
import re
from typing import BinaryIO

from orchestrator.check.untrusted import _escape, _unsafe

MARK = "orch:"
BOX_PREFIX = "[box] "
_LINE_ENDS = re.compile(r"([\r\n])")


def _escaped(text: str) -> str:
    return "".join(_escape(c) if c != "\t" and _unsafe(c) else c for c in text)


class TerminalSink:
    """A binary sink that writes box text to `raw` (a terminal) neutralised."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line_start = True
        self._held = ""  # the start of a line that may still become "orch:"

    def write(self, data: bytes) -> int:
        self.raw.write(self._convert(self._decoder.decode(data)).encode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self.raw.flush()

    def finish(self) -> None:
        """The stream ended: write what was held back (a last line's start, a partial
        character)."""
        rest = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        self.raw.write(_escaped(rest).encode("utf-8", "replace"))
        self.raw.flush()

    def _convert(self, text: str) -> str:
        out: list[str] = []
        parts = [p for p in _LINE_ENDS.split(self._held + text) if p]
        self._held = ""
        for index, part in enumerate(parts):
            if part in ("\r", "\n"):
                out.append(part)
                self._line_start = True
                continue
            if self._line_start:
                if part.startswith(MARK):
                    out.append(BOX_PREFIX)
                elif index == len(parts) - 1 and MARK.startswith(part):
                    self._held = part  # "orc": wait for the next bytes to decide
                    continue
            out.append(_escaped(part))
            self._line_start = False
        return "".join(out)


def for_terminal(sink: BinaryIO, stream: object) -> BinaryIO:
    """`sink` wrapped in a TerminalSink when `stream` (its text stream) is a terminal."""
    isatty = getattr(stream, "isatty", None)
    return TerminalSink(sink) if callable(isatty) and isatty() else sink  # type: ignore[return-value]


def finish(sink: object) -> None:
    end = getattr(sink, "finish", None)
    if callable(end):
        end()
