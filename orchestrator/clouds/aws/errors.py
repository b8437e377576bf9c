"""AWS EC2 error codes and what they mean to orch: the one place that lists them.

From the EC2 API reference, "Error codes for the Amazon EC2 API"
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
"""

from __future__ import annotations

from orchestrator.clouds.base import CloudError, ErrorKind

# "This instance type/market/zone cannot be had right now": `orch up` tries the next candidate.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "InsufficientFreeAddressesInSubnet",
        "Unsupported",
        "UnsupportedOperation",
    }
)
# The account's limits: another type or region may still fit.
QUOTA_CODES = frozenset(
    {"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"}
)
# Eventual consistency and busy resources: the same call succeeds a little later.
RETRYABLE_CODES = frozenset(
    {
        "DependencyViolation",
        "RequestLimitExceeded",
        "Throttling",
        "IncorrectState",
        # A placement group still counting a node that is terminating.
        "InvalidPlacementGroup.InUse",
    }
)
# SSM: the instance's agent has not registered (yet).
AGENT_NOT_READY_CODES = frozenset({"InvalidInstanceId", "InvalidInstanceInformationFilterValue"})


class AwsError(CloudError):
    """An AWS API call failed; `code` is the API's error code."""

    def __init__(self, message: str, code: str = "", hint: str | None = None):
        super().__init__(message, code, hint=hint, kind=error_kind(code))


def error_kind(code: str) -> ErrorKind:
    if code in CAPACITY_CODES:
        return ErrorKind.CAPACITY
    if code in QUOTA_CODES:
        return ErrorKind.QUOTA
    if code in RETRYABLE_CODES:
        return ErrorKind.RETRYABLE
    return ErrorKind.PERMANENT
