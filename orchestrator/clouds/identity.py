"""What a box's own cloud identity may do: the role orch gives it, or one the user names.

A box's checkpoint agent reaches the store with the box's identity (an EC2 instance profile, an
ECS instance RAM role), never with keys copied to it; a cloud's in-guest agent (SSM, Cloud
Assistant) needs one too. Each cloud maps a BoxIdentity to its module's inputs (its tfvars):
create a least-privilege role for the box (`down` and the sweeper remove it with the box), or
attach `existing`, created by the user, which orch never touches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import UsageError

# The union of what the clouds accept: IAM instance profile names ([\w+=,.@-], 1-128) and
# RAM role names (letters, digits, ".", "-", 1-64); each cloud checks its own rule too.
_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,128}")
_STORE = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?P<prefix>(/[^\s*?]*)?)")


@dataclass(frozen=True, slots=True)
class BoxIdentity:
    existing: str | None = None  # `--instance-profile NAME`: attach it, create nothing
    stores: tuple[str, ...] = ()  # s3://bucket/prefix the box's checkpoint agent reads and writes
    agent: bool = False  # the cloud's in-guest agent runs commands (`--via ssm`)

    @property
    def wanted(self) -> bool:
        """Whether the box gets an identity at all (none: no role is created)."""
        return bool(self.existing or self.stores or self.agent)

    def store_parts(self) -> list[tuple[str, str]]:
        """[(bucket, prefix without surrounding slashes)] of `stores`, validated."""
        parts = []
        for url in self.stores:
            match = _STORE.fullmatch(url)
            if not match or ".." in url:
                raise UsageError(f"checkpoint store {url!r} is not s3://bucket[/prefix]")
            parts.append((match.group("bucket"), match.group("prefix").strip("/")))
        return parts


def check_existing(name: str | None) -> str | None:
    """`--instance-profile NAME`, checked before any cloud call."""
    if name is None:
        return None
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"--instance-profile {name!r} is not a role or instance profile name"
            " (1-128 letters, digits and + = , . @ _ -)"
        )
    return name
