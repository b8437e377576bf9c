"""Plain-text rendering shared by commands: aligned tables, tables fitted to the terminal's
width, and memory-fit bars (in ASCII where stdout cannot encode the block characters)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

BAR_WIDTH = 10
BLOCKS = "█░"
ASCII_BLOCKS = "#."


def can_encode(text: str, stream: TextIO | None = None) -> bool:
    """Whether `stream` (stdout) can write `text` in its encoding (PYTHONIOENCODING=ascii, a
    C locale or a legacy code page cannot write the bar's blocks)."""
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def fit_bar(fraction: float, width: int = BAR_WIDTH, blocks: str | None = None) -> str:
    """A bar like [██████░░░░] for a 0..1 fraction (clamped); [######....] where stdout
    cannot encode the blocks."""
    full, empty = blocks or (BLOCKS if can_encode(BLOCKS) else ASCII_BLOCKS)
    filled = max(0, min(width, round(fraction * width)))
    return "[" + full * filled + empty * (width - filled) + "]"


def terminal_width() -> int | None:
    """The width to fit tables to: $COLUMNS, else the terminal's (shutil.get_terminal_size);
    None when stdout is no terminal and COLUMNS is unset (a file or a pipe: no limit)."""
    raw = os.environ.get("COLUMNS", "")
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


@dataclass(slots=True)
class Column:
    """One column of a table that `fit_table` may shorten: a shorter header, shorter cells,
    or, when `drop` is set, leave out (lower `drop` goes first; None: always kept)."""

    header: str
    cells: list[str]
    right: bool = False
    drop: int | None = None
    short: str = ""  # a shorter header
    compact: list[str] = field(default_factory=list)  # shorter cells, same rows


def fit_table(columns: Sequence[Column], width: int | None) -> tuple[str, list[str]]:
    """The table within `width` characters where it can be: first shorter headers and cells,
    then columns dropped in their `drop` order. Returns the text and the dropped headers."""

    def render(cols: Sequence[Column], short: bool) -> str:
        headers = [(c.short or c.header) if short else c.header for c in cols]
        cells = [(c.compact or c.cells) if short else c.cells for c in cols]
        rows = [list(row) for row in zip(*cells, strict=True)] if cells else []
        right = {i for i, c in enumerate(cols) if c.right}
        return table(headers, rows, right)

    def fits(text: str) -> bool:
        return width is None or max(map(len, text.splitlines()), default=0) <= width

    text = render(columns, False)
    if fits(text):
        return text, []
    kept = list(columns)
    dropped: list[str] = []
    text = render(kept, True)
    for column in sorted((c for c in columns if c.drop is not None), key=lambda c: c.drop):
        if fits(text):
            break
        kept.remove(column)
        dropped.append(column.header)
        text = render(kept, True)
    return text, dropped


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] | None = None
) -> str:
    """Columns padded to their widest cell; columns in `right` are right-aligned."""
    right = right or set()
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 GPU`, `8 GPUs`: a count with its noun in the right number (`plural` when adding an s
    is wrong: counted(2, "entry", "entries"))."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 1024**3:.1f}"


def tolerate_narrow_encodings() -> None:
    """Where stdout/stderr cannot encode what orch prints (PYTHONIOENCODING=ascii), write a
    "?" for a character it cannot encode rather than fail with a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not can_encode(BLOCKS + "×—", stream):
            reconfigure(errors="replace")
