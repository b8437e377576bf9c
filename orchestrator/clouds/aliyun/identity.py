"""Aliyun: a box's identity -> the aliyun_gpu module's instance RAM role inputs.

With `--instance-profile NAME` (on Aliyun: an existing instance RAM role) the instance gets that
role and orch creates none. Otherwise, when the box has a checkpoint store, the module creates
a role for this box alone (only the ECS service may assume it; tagged like the box plus
orch:region, so `down` and the sweeper find and remove it, see ram.py) with one custom policy
allowing only oss:GetObject / PutObject / DeleteObject / AbortMultipartUpload / ListParts on
BUCKET/PREFIX/* and oss:ListObjects on BUCKET with oss:Prefix PREFIX/*. The box's checkpoint
agent reads the role's STS credentials from the instance metadata
(ram/security-credentials/ROLE, https://www.alibabacloud.com/help/en/ecs/user-guide/attach-an-instance-ram-role-to-an-ecs-instance).
Cloud Assistant (`--via` the cloud's agent) needs no role, so it asks for none.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.clouds.identity import BoxIdentity
from orchestrator.errors import UsageError

# RAM role names: 1-64 letters, digits, "." and "-"
# (https://www.alibabacloud.com/help/en/ram/developer-reference/api-ram-2015-05-01-createrole).
ROLE_NAME = re.compile(r"[A-Za-z0-9.-]{1,64}")
# OSS bucket names: 3-63 lower-case letters, digits and "-", starting and ending with a letter
# or digit (https://www.alibabacloud.com/help/en/oss/user-guide/bucket-naming-conventions).
BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


def identity_vars(identity: BoxIdentity | None) -> dict[str, Any]:
    """The module's RAM role inputs for `identity` ({} when the box needs no role)."""
    if identity is None or not identity.wanted:
        return {}
    if identity.existing:
        if not ROLE_NAME.fullmatch(identity.existing):
            raise UsageError(
                f"--instance-profile {identity.existing!r} is no RAM role name"
                " (1-64 letters, digits, . and -)"
            )
        return {"ram_role_name": identity.existing}
    parts = identity.store_parts()
    if not parts:  # Cloud Assistant only: no role
        return {}
    for bucket, _ in parts:
        if not BUCKET.fullmatch(bucket):
            raise UsageError(
                f"checkpoint bucket {bucket!r} is no OSS bucket name"
                " (3-63 lower-case letters, digits and -)"
            )
    return {
        "create_ram_role": True,
        "ram_role_oss_prefixes": [f"{b}/{p}" if p else b for b, p in parts],
    }
