"""Errors the emulated API answers with, ids, and the time formats ECS uses."""

from __future__ import annotations

import random
import string
import uuid
from datetime import UTC, datetime

# ------------------------------------------------------------------------------ errors


class SimError(Exception):
    """An API error: serialised as {"Code", "Message", "RequestId", ...} with `status`."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def not_found(code: str, what: str) -> SimError:
    return SimError(code, f"The specified {what} does not exist.", 404)


def invalid(message: str, code: str = "InvalidParameter") -> SimError:
    return SimError(code, message, 400)


# ------------------------------------------------------------------------------ helpers

_REGION_CODES = {
    "cn-hangzhou": "bp1",
    "cn-beijing": "2ze",
    "cn-shanghai": "uf6",
    "cn-shenzhen": "wz9",
    "ap-southeast-1": "t4n",
    "us-west-1": "rj9",
    "eu-central-1": "gw8",
}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MINUTE_FORMAT = "%Y-%m-%dT%H:%MZ"  # what ECS uses for instance CreationTime / StartTime


def new_id(prefix: str, region: str) -> str:
    body = "".join(random.choices(string.ascii_lowercase + string.digits, k=17))
    return f"{prefix}-{_REGION_CODES.get(region, '0xi')}{body}"


def new_request_id() -> str:
    return str(uuid.uuid4()).upper()


def fmt_time(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


def fmt_minute(moment: datetime) -> str:
    return moment.strftime(MINUTE_FORMAT)


def parse_release_time(text: str) -> datetime:
    """ECS accepts yyyy-MM-ddTHH:mm:ssZ (and the minute form it prints itself), UTC only."""
    for pattern in (TIME_FORMAT, MINUTE_FORMAT):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise SimError(
        "InvalidAutoReleaseTime.Malformed",
        "The specified parameter autoReleaseTime is not valid.",
        400,
    )
