"""What this machine has configured for AWS, read the way the SDKs' default chain reads it,
but offline: environment variables and the shared config/credentials files, no boto3.

Credential sources (botocore's chain, https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html):
AWS_ACCESS_KEY_ID, AWS_PROFILE, web identity (AWS_WEB_IDENTITY_TOKEN_FILE), container
credentials (AWS_CONTAINER_CREDENTIALS_*), then the shared files. Region
(https://docs.aws.amazon.com/sdkref/latest/guide/feature-region.html): AWS_REGION, then
AWS_DEFAULT_REGION, then `region` of the profile in the config file. Instance-profile
credentials (IMDS) are not probed: that needs the network.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.clouds.base import LocalSetup

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)


def _shared_file(variable: str, default: str) -> Path:
    return Path(os.environ.get(variable) or os.path.expanduser(default))


def _profile_region(config: Path, profile: str) -> str | None:
    if not config.is_file():
        return None
    import configparser  # only when a config file exists

    parser = configparser.ConfigParser()
    try:
        parser.read(config)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None  # botocore would refuse it too; planning just does without it
    section = "default" if profile == "default" else f"profile {profile}"
    region = parser.get(section, "region", fallback="").strip()
    return region or None


def local_setup() -> LocalSetup:
    env = os.environ
    profile = env.get("AWS_PROFILE") or "default"
    config = _shared_file("AWS_CONFIG_FILE", "~/.aws/config")
    credentials = _shared_file("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
    basis = next((name for name in CREDENTIAL_VARIABLES if env.get(name)), "")
    if not basis:
        basis = next((str(f) for f in (credentials, config) if f.is_file()), "")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(name, "").strip():
            return LocalSetup(bool(basis), basis, env[name].strip(), name)
    region = _profile_region(config, profile)
    return LocalSetup(bool(basis), basis, region, str(config) if region else "")
