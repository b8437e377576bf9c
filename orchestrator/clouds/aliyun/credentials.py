"""Alibaba Cloud: resolve the credential chain now, as client.py will, without an API call.

ALIBABA_CLOUD_ACCESS_KEY_ID with ALIBABA_CLOUD_ACCESS_KEY_SECRET first (client.py reads them
at call time); otherwise alibabacloud-credentials' default chain: environment, OIDC, the
aliyun CLI's ~/.aliyun/config.json, ~/.alibabacloud/credentials, then an ECS RAM role from
the metadata service (alibabacloud_credentials/providers.py `DefaultCredentialsProvider`,
https://www.alibabacloud.com/help/en/sdk/developer-reference/v2-manage-python-access-credentials).
The package logs every failed provider with a traceback on its own stderr handler (logger
"credentials"): `quiet_credentials_log` turns that off, orch reports the outcome itself.
"""

from __future__ import annotations

import logging
import os

from orchestrator.clouds.values import Credentials

HINT = "set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET"


def quiet_credentials_log() -> None:
    """Silence alibabacloud_credentials' logger (it has its own StreamHandler to stderr)."""
    logging.getLogger("credentials").disabled = True


def credentials() -> Credentials:
    if os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID") and os.environ.get(
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
    ):
        return Credentials(True, source="env")
    quiet_credentials_log()
    try:
        from alibabacloud_credentials.client import Client

        Client().get_credential()
    except Exception as exc:  # the chain raises CredentialException, or anything its providers do
        first = str(exc).split(":", 1)[0][:120]
        return Credentials(False, problem=f"no Alibaba Cloud credentials found: {first}", hint=HINT)
    return Credentials(True, source="default chain")
