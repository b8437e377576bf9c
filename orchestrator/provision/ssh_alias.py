"""`Host orch-NAME` entries for a user's ssh_config, so editors, scp and plain ssh reach a box
with its key and pinned host key.

Each box gets a file of its own, $ORCH_HOME/ssh/NAME.conf (0600); the user's ~/.ssh/config
(or $ORCH_USER_SSH_CONFIG) gets one `Include` line for the folder, put first, since ssh_config
uses the first value it reads for each option (ssh_config(5)) and an Include after a `Host *`
block would be read too late. `orch down` removes the box's file; the Include stays, harmless.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box, orch_home, validate_box_name

MARKER = "# added by orch (orch up/run --ssh-alias): boxes as Host orch-NAME"
_SAFE = re.compile(r"[A-Za-z0-9_./@:+-]+")  # what may stand unquoted in an ssh_config value


def alias_dir() -> Path:
    return orch_home() / "ssh"


def alias_path(name: str) -> Path:
    return alias_dir() / f"{validate_box_name(name)}.conf"


def user_config() -> Path:
    explicit = os.environ.get("ORCH_USER_SSH_CONFIG")
    return Path(explicit).expanduser() if explicit else Path.home() / ".ssh" / "config"


def _value(text: str, what: str) -> str:
    # ssh_config has no escaping for all characters: refuse what it could misread.
    if not _SAFE.fullmatch(text):
        raise OrchError(f"{what} {text!r} cannot be written into an ssh_config entry")
    return text


def entry(box: Box, host: str, user: str) -> str:
    return "\n".join(
        [
            f"Host orch-{validate_box_name(box.name)}",
            f"  HostName {_value(host, 'box address')}",
            f"  User {_value(user, 'ssh user')}",
            f"  IdentityFile {_value(str(box.key_path), 'key path')}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {_value(str(box.known_hosts_path), 'known_hosts path')}",
            # The first contact pins the key (as `orch check` does); later ones insist on it.
            "  StrictHostKeyChecking accept-new",
            "",
        ]
    )


def write_alias(box: Box, host: str, user: str) -> Path:
    """Write the box's entry and make sure the user's ssh_config includes the folder."""
    folder = alias_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = alias_path(box.name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(entry(box, host, user))
    _include_in_user_config(folder)
    return path


def remove_alias(name: str) -> None:
    alias_path(name).unlink(missing_ok=True)


def _include_in_user_config(folder: Path) -> None:
    # A link (a dotfiles checkout's file) is written through: os.replace would put a plain
    # file in the link's place.
    config = user_config().resolve()
    include = f"Include {_value(str(folder), 'orch home')}/*.conf"
    text = config.read_text() if config.exists() else ""
    if include in text.splitlines():
        return
    config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    new = f"{MARKER}\n{include}\n\n{text}"
    tmp = config.with_name(f".{config.name}.orch-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(new)
    if config.exists():
        os.chmod(tmp, config.stat().st_mode & 0o777)
    os.replace(tmp, config)
