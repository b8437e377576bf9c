"""Text that a box sent us, made safe to print on a terminal.

A box controls what its nvidia-smi (and its shell, and its sshd) print. Printed raw, an ESC
sequence can clear the screen, set the window title, move the cursor and overwrite report
lines, so a box could forge "OK" over its own MISMATCH. `printable` escapes every character
that is not plain printable text (C0/C1 controls, DEL, bidirectional overrides and other
format characters, unpaired surrogates from undecodable bytes) as a visible `\\xNN`/`\\uNNNN`,
the way `json.dumps` already does on the --json path. Every text-mode line of `orch check`
and `orch watch` that carries box text goes through it.
"""

from __future__ import annotations

import unicodedata

# One report line never needs more than this of what a box said.
MAX_CHARS = 500


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    # Cc: controls (ESC, BEL, CR, backspace, C1 CSI...); Cf: format characters (bidi
    # overrides, zero-width joiners); Cs: lone surrogates; Zl/Zp: line/paragraph separators.
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def printable(text: object, limit: int | None = MAX_CHARS) -> str:
    """`text` with every non-printable character escaped, cut to `limit` characters."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    safe = "".join(_escape(c) if _unsafe(c) else c for c in text)
    return safe + ("..." if cut else "")


def printable_lines(text: object, limit: int | None = None) -> str:
    """`text` escaped line by line (each line as `printable`): a multi-line message (a cloud's
    or Terraform's error detail) stays readable, and no line can carry a terminal escape."""
    return "\n".join(printable(line, limit) for line in str(text).splitlines())


def last_line(text: str, limit: int = 300) -> str:
    """The last line of `text` that is not blank, escaped and cut to `limit` ("" if none):
    what a failed box command, ssh or rsync said last, for orch's one-line error."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return printable(lines[-1], limit) if lines else ""
