"""What this machine has configured for Alibaba Cloud, read offline (no SDK, no network).

Credentials, as the default credential chain of alibabacloud-credentials looks for them
(https://www.alibabacloud.com/help/en/sdk/developer-reference/v2-manage-python-access-credentials):
ALIBABA_CLOUD_ACCESS_KEY_ID, the credentials file (ALIBABA_CLOUD_CREDENTIALS_FILE, default
~/.alibabacloud/credentials) and the aliyun CLI's ~/.aliyun/config.json. Region:
ALIBABA_CLOUD_REGION_ID (the CLI's and Terraform provider's variable), else the CLI profile's
region_id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.clouds.base import LocalSetup


def _cli_region(config: Path) -> str | None:
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    current = data.get("current")
    for profile in data.get("profiles") or []:
        if isinstance(profile, dict) and profile.get("name") == current:
            region = profile.get("region_id")
            return region if isinstance(region, str) and region else None
    return None


def local_setup() -> LocalSetup:
    env = os.environ
    credentials = Path(
        env.get("ALIBABA_CLOUD_CREDENTIALS_FILE")
        or os.path.expanduser("~/.alibabacloud/credentials")
    )
    cli_config = Path(os.path.expanduser("~/.aliyun/config.json"))
    basis = "ALIBABA_CLOUD_ACCESS_KEY_ID" if env.get("ALIBABA_CLOUD_ACCESS_KEY_ID") else ""
    if not basis:
        basis = next((str(f) for f in (credentials, cli_config) if f.is_file()), "")
    if env.get("ALIBABA_CLOUD_REGION_ID", "").strip():
        return LocalSetup(bool(basis), basis, env["ALIBABA_CLOUD_REGION_ID"].strip(),
                          "ALIBABA_CLOUD_REGION_ID")  # fmt: skip
    region = _cli_region(cli_config)
    return LocalSetup(bool(basis), basis, region, str(cli_config) if region else "")
