"""Alibaba Cloud error codes and what they mean to orch: the one place that lists them.

Codes from the ECS API reference (RunInstances, DescribeAvailableResource, DescribePrice error
tables, https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances)
and the VPC API (DeleteVpc / DeleteVSwitch DependencyViolation.*).
"""

from __future__ import annotations

from orchestrator.clouds.base import CloudError, ErrorKind

# "No capacity for this type/market here right now": `orch up` fails over.
CAPACITY_CODES = frozenset(
    {
        "OperationDenied.NoStock",
        "Zone.NotOnSale",
        "InvalidResourceType.NotSupported",
        "InvalidInstanceType.NotSupported",
        "InvalidSpotPriceLimit.LowerThanPublicPrice",
    }
)
# The account's limits: the next candidate (another type or region) may still fit.
QUOTA_CODES = frozenset({"QuotaExceed.ElasticQuota", "QuotaExceed"})
# Codes that retrying cannot fix: bad keys, missing RAM permissions (prefixes).
PERMANENT_PREFIXES = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "InvalidSecurityToken",
    "Forbidden",
    "NoPermission",
    "InvalidRegionId",
)
# Codes after which every further price call fails the same way: stop at once.
CURRENCY_MISMATCH = "Orch.CurrencyMismatch"
FATAL_PRICE_CODES = frozenset(
    {
        "",  # no response at all: connection refused, DNS, TLS
        "InvalidAccessKeyId.NotFound",
        "InvalidAccessKeyId.Inactive",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "Forbidden.RAM",
        "Forbidden.AccessKeyDisabled",
        "Forbidden",
        "NoPermission",
        CURRENCY_MISMATCH,
    }
)


class AliyunError(CloudError):
    """An Alibaba Cloud API call failed; `code` is the API's error code."""

    def __init__(self, message: str, code: str = "", hint: str | None = None):
        super().__init__(message, code, hint=hint, kind=error_kind(code))


class CapacityError(AliyunError):
    """The instance type has no stock (or no quota) for this market in the region.

    Its codes are ones `orch up` fails over on: a caller that checks stock before applying
    should move on to the plan's next candidate.
    """


def error_kind(code: str) -> ErrorKind:
    if code in CAPACITY_CODES:
        return ErrorKind.CAPACITY
    if code in QUOTA_CODES or code.startswith("QuotaExceed."):
        return ErrorKind.QUOTA
    if blocked(code) or code in ("Throttling", "ServiceUnavailable"):
        return ErrorKind.RETRYABLE
    # Everything else, and "" (no answer at all: a wrong endpoint, no network), is not fixed
    # by asking again in a loop.
    return ErrorKind.PERMANENT


def blocked(code: str) -> bool:
    """An error that goes away once what holds the resource is gone (or stops being busy)."""
    return code.startswith(("DependencyViolation", "Incorrect")) or code == "OperationConflict"


def is_permanent_for_agent(code: str) -> bool:
    """Cloud Assistant: bad keys or permissions, as opposed to an agent not online yet."""
    return code.startswith(PERMANENT_PREFIXES)
