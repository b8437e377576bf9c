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


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or []}
