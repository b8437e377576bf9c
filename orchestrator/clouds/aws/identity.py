"""AWS: a box's identity -> the aws_gpu module's instance profile inputs.

With `--instance-profile NAME` the instance gets that existing profile and orch creates none.
Otherwise, when the box needs one (a checkpoint store, `--via ssm`), the module creates a role
and an instance profile for this box alone (path /orch/, tagged like the box, so `down` and the
sweeper find and remove them, see tags.py and cleanup.py), allowed only:
- s3:GetObject, s3:PutObject, s3:DeleteObject, s3:AbortMultipartUpload on BUCKET/PREFIX/* and
  s3:ListBucket on BUCKET with s3:prefix PREFIX/* (the run's own checkpoint prefix);
- the AWS managed policy AmazonSSMManagedInstanceCore with `--via ssm` (what Systems Manager's
  agent needs: https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-instance-permissions.html).
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.clouds.identity import BoxIdentity
from orchestrator.errors import UsageError

# IAM names: "alphanumeric characters plus +=,.@-_", 1-128 for an instance profile
# (https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateInstanceProfile.html).
PROFILE_NAME = re.compile(r"[\w+=,.@-]{1,128}", re.ASCII)


def identity_vars(identity: BoxIdentity | None) -> dict[str, Any]:
    """The module's iam_* inputs for `identity` ({} without one: no profile at all)."""
    if identity is None or not identity.wanted:
        return {}
    if identity.existing:
        if not PROFILE_NAME.fullmatch(identity.existing):
            raise UsageError(f"--instance-profile {identity.existing!r} is no IAM profile name")
        return {"iam_instance_profile": identity.existing}
    prefixes = [
        f"{bucket}/{prefix}" if prefix else bucket for bucket, prefix in identity.store_parts()
    ]
    return {
        "create_iam_instance_profile": True,
        "iam_role_s3_prefixes": prefixes,
        "iam_role_ssm": bool(identity.agent),
    }
