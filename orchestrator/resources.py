"""Locate files that ship beside the package: Terraform modules and the driver script.

In a source checkout (editable install, the README's set-up) they live at the repository
root (`terraform/modules/...`, `scripts/...`); a built wheel carries a copy under
`orchestrator/resources/`. Callers ask by repository-relative path and never hard-code either.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchError

_PACKAGE_DIR = Path(__file__).resolve().parent
_CANDIDATE_ROOTS = (_PACKAGE_DIR / "resources", _PACKAGE_DIR.parent)


def resource_path(relative: str) -> Path:
    """Return the absolute path of a shipped file or folder, e.g. "terraform/modules/aws_gpu"."""
    for root in _CANDIDATE_ROOTS:
        candidate = root / relative
        if candidate.exists():
            return candidate
    raise OrchError(f"orch installation is incomplete: {relative} not found")
