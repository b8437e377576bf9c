"""Install the alicloud test provider into a Terraform filesystem mirror, and write CLI configs.

Unpacked mirror layout (what `terraform providers mirror` would produce for a real provider):

    <mirror>/registry.terraform.io/aliyun/alicloud/<VERSION>/linux_amd64/
        terraform-provider-alicloud_v<VERSION>      an executable wrapper script

The wrapper execs this interpreter on `python -m tests.sim.alicloud_provider` with the
repository root on PYTHONPATH, so the mirror must be written on the machine that runs the tests
(it holds absolute paths; tests write it under a temporary directory).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.sim.alicloud_provider import VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "linux_amd64"
ALICLOUD_ADDRESS = "registry.terraform.io/aliyun/alicloud"
# Places a pre-installed mirror of the real hashicorp/aws provider may live (tests only).
AWS_MIRROR_CANDIDATES = (
    "/opt/tf-plugins",
    "/usr/share/terraform/plugins",
    "~/.terraform.d/plugins",
)


def write_alicloud_mirror(mirror: Path, python: str | None = None) -> Path:
    """Write the wrapper into `mirror`; return the mirror root."""
    target = mirror / ALICLOUD_ADDRESS / VERSION / PLATFORM
    target.mkdir(parents=True, exist_ok=True)
    script = target / f"terraform-provider-alicloud_v{VERSION}"
    interpreter = python or sys.executable
    script.write_text(
        "#!/bin/sh\n"
        "# Test stand-in for aliyun/alicloud: see tests/sim/alicloud_provider.\n"
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        "# The `tf` runner caches its TLS certificate under ~/.cache: needs a writable HOME.\n"
        '[ -w "${HOME:-/nonexistent}" ] || { HOME=$(mktemp -d); export HOME; }\n'
        f'exec {shlex.quote(interpreter)} -m tests.sim.alicloud_provider "$@"\n'
    )
    script.chmod(0o755)
    return mirror


def find_aws_mirror() -> Path | None:
    """The directory holding registry.terraform.io/hashicorp/aws, if this machine has one."""
    explicit = os.environ.get("ORCH_TEST_TF_MIRROR")
    candidates = [explicit] if explicit else []
    candidates += list(AWS_MIRROR_CANDIDATES)
    for candidate in candidates:
        path = Path(candidate).expanduser()
        if (path / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
            return path
    return None


def write_cli_config(path: Path, mirrors: Iterable[tuple[Path, list[str]]]) -> Path:
    """A TF_CLI_CONFIG_FILE with one filesystem_mirror per (path, include patterns); no direct
    installation, so `terraform init` never reaches the network."""
    blocks = []
    for mirror, include in mirrors:
        blocks.append(
            "  filesystem_mirror {\n"
            f"    path    = {json.dumps(str(mirror))}\n"
            f"    include = {json.dumps(list(include))}\n"
            "  }\n"
        )
    path.write_text("provider_installation {\n" + "".join(blocks) + "}\n")
    return path


def alicloud_cli_config(workdir: Path) -> Path:
    """Mirror + CLI config for the alicloud test provider (and hashicorp/aws when available)."""
    mirror = write_alicloud_mirror(workdir / "alicloud-mirror")
    mirrors: list[tuple[Path, list[str]]] = [(mirror, [ALICLOUD_ADDRESS])]
    aws = find_aws_mirror()
    if aws is not None:
        mirrors.append((aws, ["registry.terraform.io/hashicorp/*"]))
    return write_cli_config(workdir / "terraformrc", mirrors)
