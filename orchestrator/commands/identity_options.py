"""`--instance-profile`, shared by `orch up` and `orch run`, and the box identity it makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from orchestrator.clouds.identity import BoxIdentity, check_existing

F = TypeVar("F", bound=Callable[..., object])


def instance_profile_option() -> Callable[[F], F]:
    return click.option(
        "--instance-profile",
        "instance_profile",
        metavar="NAME",
        help="Give the box this existing role (AWS instance profile, Aliyun RAM role) instead of"
        " the least-privilege one orch creates when the box needs one (checkpoints, --via ssm).",
    )


def box_identity(
    instance_profile: str | None, *, agent: bool = False, stores: tuple[str, ...] = ()
) -> BoxIdentity:
    """The box's identity from the options (validated: UsageError)."""
    identity = BoxIdentity(check_existing(instance_profile), stores, agent)
    identity.store_parts()
    return identity
