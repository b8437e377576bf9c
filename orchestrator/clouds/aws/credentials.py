"""AWS: resolve the credential chain now, the way every boto3 call will, without an API call.

botocore's chain (botocore/credentials.py, `create_credential_resolver`): environment,
assume-role and web-identity profiles, SSO, the shared credentials and config files, the
container endpoint, then the instance metadata service (instance profiles). Providers that
need a network round trip to *use* the credentials (assume-role, SSO) return deferred
credentials here, so nothing is called yet. `Credentials.method` names the provider that
answered: "env", "shared-credentials-file", "iam-role", "assume-role", "sso", ...
(https://github.com/boto/botocore/blob/develop/botocore/credentials.py).
"""

from __future__ import annotations

from orchestrator.clouds.values import Credentials

HINT = "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"


def credentials() -> Credentials:
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        found = boto3.Session().get_credentials()
    except BotoCoreError as exc:  # AWS_PROFILE names no profile, a broken config file
        return Credentials(False, problem=f"AWS credentials unusable: {exc}", hint=HINT)
    except (OSError, ValueError) as exc:
        return Credentials(False, problem=f"AWS credentials unreadable: {exc}", hint=HINT)
    if found is None:
        return Credentials(False, problem="no AWS credentials found", hint=HINT)
    return Credentials(True, source=str(getattr(found, "method", "") or "found"))
