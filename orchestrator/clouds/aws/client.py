"""boto3 clients and the one wrapper every AWS call goes through.

boto3 is imported inside functions: offline commands never pay for it. Endpoints, profiles
and credentials come from the standard chain (AWS_ENDPOINT_URL, AWS_PROFILE, ...).
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.base import NoCredentials


def client(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(retries={"max_attempts": 8, "mode": "adaptive"})
    try:
        return boto3.client(service, region_name=region, config=config)
    except BotoCoreError as exc:  # e.g. AWS_PROFILE names a profile that does not exist
        raise AwsError(
            f"cannot set up an AWS {service} client: {exc}", hint="check AWS_PROFILE"
        ) from None


def call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    from botocore.parsers import ResponseParserError

    try:
        return fn(*args, **kwargs)
    except NoCredentialsError:
        raise NoCredentials(
            "no AWS credentials found", hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        raise AwsError(f"AWS {what} failed: {code}: {error.get('Message', '')}", code) from None
    except BotoCoreError as exc:
        raise AwsError(f"AWS {what} failed: {exc}") from None
    except ResponseParserError as exc:
        raise AwsError(f"AWS {what} failed: {unreadable_answer(exc)}", hint=ENDPOINT_HINT) from None


# botocore raises ResponseParserError (botocore/parsers.py: `class ResponseParserError(
# Exception)`, outside BotoCoreError) when an answer is not AWS's XML or JSON: an HTML error
# page from a proxy, a load balancer or an endpoint that is not AWS's. Its text carries the
# whole body; only its first line is shown.
ENDPOINT_HINT = "check AWS_ENDPOINT_URL and any proxy between here and AWS"


def unreadable_answer(exc: Exception) -> str:
    first = (str(exc).splitlines() or [""])[0].rstrip(": ")
    return f"its answer is not an AWS response ({first or type(exc).__name__})"


def sdk_errors() -> tuple[type[Exception], ...]:
    """What a boto3 call raises when it fails: an error answer (ClientError), the SDK's own
    errors (no credentials, no connection, a bad endpoint) and an answer it cannot read."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return (ClientError, BotoCoreError, ResponseParserError)


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or []}
