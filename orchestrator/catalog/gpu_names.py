"""GPU names as people type them: `H100` for the catalog's `H100-80GB`, `a10g` for `A10G`.

An exact name matches first, ignoring case; otherwise the catalog names that start with the
given name and a "-" (the memory suffix: `A100` -> `A100-40GB`, `A100-80GB`). One match is
the answer; several are an error that lists them; none, one that lists every known name.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.errors import UsageError


def resolve_gpu(name: str, known: Iterable[str], flag: str = "--gpu") -> str:
    """The catalog GPU `name` stands for; UsageError (naming `flag`) when none or several."""
    names = sorted(known)
    wanted = name.strip().lower()
    exact = [n for n in names if n.lower() == wanted]
    if exact:
        return exact[0]
    matches = [n for n in names if wanted and n.lower().startswith(wanted + "-")]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"{flag} {name!r} is ambiguous: it matches {', '.join(matches)}")
    raise UsageError(f"{flag}: unknown GPU {name!r}", hint=f"known: {', '.join(names)}")
