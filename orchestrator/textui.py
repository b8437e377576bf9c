"""Plain-text rendering shared by commands: aligned tables and memory-fit bars."""

from __future__ import annotations

from collections.abc import Sequence

BAR_WIDTH = 10


def fit_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A bar like [██████░░░░] for a 0..1 fraction (clamped)."""
    filled = max(0, min(width, round(fraction * width)))
    return "[" + "█" * filled + "░" * (width - filled) + "]"


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


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 1024**3:.1f}"
