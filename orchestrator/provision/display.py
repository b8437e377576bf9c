"""How a box is shown: its login target, the summary `orch up --json` and `orch status
--json` print, and the ssh command line (None when a tampered record makes it unsafe)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from orchestrator.plan_validate import SSH_USER_RE
from orchestrator.provision import liveness
from orchestrator.provision.boxes import Box


def ssh_target(box: Box) -> tuple[str, str | None]:
    """(login user, address) of a box: what its outputs say, else the plan's user; None for an
    address not known yet."""
    outputs = box.outputs or {}
    host = outputs.get("public_ip") or outputs.get("private_ip")
    return str(outputs.get("ssh_user") or box.candidate.ssh_user), str(host) if host else None


def box_summary(box: Box) -> dict[str, object]:
    """The object `orch up --json` prints (and `orch status --json` lists)."""
    outputs = box.outputs or {}
    user, host = ssh_target(box)
    return {
        "name": box.name,
        "state": box.state,
        "cloud": box.cloud,
        "region": box.region,
        "instance_type": box.candidate.instance_type,
        "market": box.candidate.market,
        "gpu": box.candidate.gpu,
        "gpu_count": box.candidate.gpu_count,
        "instance_id": outputs.get("instance_id"),
        "public_ip": outputs.get("public_ip"),
        "private_ip": outputs.get("private_ip"),
        "ssh_user": user,
        "ssh_command": ssh_command(box.key_path, box.known_hosts_path, user, host)
        if host
        else None,  # None too when the record's user or host is not safe to print
        "created_at": box.created_at,
        "expires_at": box.expires_at,
        "ttl": box.ttl,
        "owner": box.owner,
        "state_url": box.state_url,
        "box_dir": str(box.directory),
        "error": box.error,
        "attempts": box.attempts,
        # "creating: terraform apply running, pid N" or "..., but the orch that ran it is gone"
        "activity": liveness.activity(box.name, box.state, box.runner),
    }


def valid_ssh_user(user: object) -> bool:
    return isinstance(user, str) and SSH_USER_RE.fullmatch(user) is not None


def ssh_command(key: Path, known_hosts: Path, user: str, host: str) -> str | None:
    """The command that logs in to the box, or None when the user or host is not safe to print
    (a tampered record): `-l USER -- HOST`, so neither can be read as an ssh option."""
    import shlex

    try:
        address = str(ipaddress.ip_address(str(host)))
    except ValueError:
        return None
    if not valid_ssh_user(user):
        return None
    return shlex.join(
        [
            "ssh",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-l",
            user,
            "--",
            address,
        ]
    )
