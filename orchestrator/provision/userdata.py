"""Build a box's user data: a few shell variables, then scripts/install_drivers.sh.

The script runs once at first boot (cloud-init on AWS, the cloud-init-compatible agent on
Aliyun). It installs the NVIDIA driver when the image lacks it, writes a readiness marker and
installs the in-guest expiry timer. Values are validated here before they are put into shell
text, so nothing a user typed can become a command.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from orchestrator import clouds
from orchestrator.errors import OrchError, UsageError
from orchestrator.resources import resource_path

SCRIPT = "scripts/install_drivers.sh"
# EC2 rejects user data over 16 KB (raw, before base64); Aliyun allows 32 KB. Stay under both.
USER_DATA_LIMIT = 16 * 1024
_EXPIRES_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def normalise_expires_at(expires_at: str) -> str:
    """Return `expires_at` as `YYYY-MM-DDTHH:MM:SSZ` (UTC), or raise UsageError."""
    text = expires_at.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"expiry {expires_at!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise UsageError(f"expiry {expires_at!r} has no time zone (use a trailing Z for UTC)")
    result = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _EXPIRES_AT.match(result)
    return result


def render_user_data(expires_at: str | None, cloud: str, extra: str = "") -> str:
    """The full user-data text for a box on `cloud` that powers itself off at `expires_at`.

    `expires_at` is an ISO 8601 UTC time ("2026-12-02T19:00:00Z") or None (no expiry).
    `extra` is a shell section (the CI runner's, orchestrator/ci_runner/userdata.py) put before
    the script's final `main "$@"`; its values are quoted by whoever rendered it.
    """
    clouds.get(cloud)  # UsageError for a cloud nobody registered
    expiry = normalise_expires_at(expires_at) if expires_at else ""
    body = resource_path(SCRIPT).read_text()
    shebang, _, rest = body.partition("\n")
    if not shebang.startswith("#!"):
        raise OrchError(f"{SCRIPT} does not start with a #! line")
    header = [
        shebang,
        "# Rendered by orch (orchestrator/provision/userdata.py).",
        f"ORCH_EXPIRES_AT='{expiry}'",
        f"ORCH_CLOUD='{cloud}'",
        "export ORCH_EXPIRES_AT ORCH_CLOUD",
    ]
    if extra:
        rest = _insert_before_main(_without_comments(rest), extra)
    text = "\n".join(header) + "\n" + rest
    size = len(text.encode())
    if size > USER_DATA_LIMIT:
        raise OrchError(f"user data is {size} bytes, over the {USER_DATA_LIMIT}-byte limit")
    return text


_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_COMMENT = re.compile(r"\s*#(?! shellcheck)")


def _without_comments(body: str) -> str:
    """`body` without its comment-only lines (outside here-documents): room under the 16 KB
    limit for an extra section. The script's behaviour does not change."""
    kept: list[str] = []
    delimiter: str | None = None
    for line in body.split("\n"):
        if delimiter is not None:
            kept.append(line)
            if line.strip() == delimiter:
                delimiter = None
            continue
        if _COMMENT.match(line):
            continue
        match = _HEREDOC.search(line)
        if match:
            delimiter = match.group(2)
        kept.append(line)
    return "\n".join(kept)


def _insert_before_main(body: str, section: str) -> str:
    lines = body.rstrip("\n").split("\n")
    if lines[-1] != 'main "$@"':
        raise OrchError(f'{SCRIPT} does not end with `main "$@"`: cannot add a section')
    return "\n".join([*lines[:-1], section.rstrip("\n"), lines[-1]]) + "\n"
