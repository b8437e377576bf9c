"""AWS: the newest PyTorch Deep Learning AMI published in a region, looked up at `orch up`.

The catalog's image is a DLAMI's public SSM parameter pinned to one PyTorch release
(images.py). AWS publishes one parameter per DLAMI, named
/aws/service/deeplearning/ami/$architecture/$ami_type/latest/ami-id, where ami_type is the AMI's
name without "deep", "learning" and "ami" (e.g. oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04;
https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html), and stops updating a
framework's parameter when that release is retired. So at `up` orch lists the x86_64 DLAMI
parameters (GetParametersByPath, recursive, 10 a page:
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParametersByPath.html)
and boots the newest "OSS Nvidia Driver GPU PyTorch X.Y (Ubuntu A.B)": highest PyTorch, then
highest Ubuntu. When the listing fails (no ssm:GetParametersByPath right, throttling) or finds
no such AMI, orch keeps the plan's parameter and says so: Terraform reads that one itself, and
fails with the parameter's name if it is gone too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AwsError

DLAMI_PATH = "/aws/service/deeplearning/ami/x86_64/"
PYTORCH = re.compile(
    re.escape(DLAMI_PATH)
    + r"oss-nvidia-driver-gpu-pytorch-(\d+)\.(\d+)-ubuntu-(\d+)\.(\d+)/latest/ami-id"
)


@dataclass(frozen=True, slots=True)
class Resolved:
    image: dict[str, Any]  # the plan image to boot (the newest parameter, or the plan's own)
    note: str  # one line for the user: what was chosen, or why the plan's image stays


def _version(name: str) -> tuple[int, ...] | None:
    match = PYTORCH.fullmatch(name)
    return tuple(int(part) for part in match.groups()) if match else None


def newest_pytorch(region: str) -> tuple[str, str] | None:
    """(parameter name, AMI id) of the newest PyTorch DLAMI in `region`, or None."""
    ssm = client("ssm", region)
    pages = ssm.get_paginator("get_parameters_by_path").paginate(Path=DLAMI_PATH, Recursive=True)
    found: list[tuple[tuple[int, ...], str, str]] = []
    for page in call("GetParametersByPath", list, pages):
        for parameter in page.get("Parameters", []):
            version = _version(str(parameter.get("Name", "")))
            value = str(parameter.get("Value", ""))
            if version is not None and value.startswith("ami-"):
                found.append((version, parameter["Name"], value))
    if not found:
        return None
    _, name, ami = max(found)
    return name, ami


def resolve(region: str, image: dict[str, Any]) -> Resolved | None:
    """The newest PyTorch DLAMI for a plan image that is one; None for any other image."""
    pinned = str(image.get("ssm_parameter") or "")
    if _version(pinned) is None:
        return None
    try:
        newest = newest_pytorch(region)
    except AwsError as exc:
        return Resolved(image, f"cannot list the DLAMIs in {region} ({exc.code or exc}); "
                        f"using the plan's {pinned}")  # fmt: skip
    if newest is None:
        return Resolved(image, f"no PyTorch DLAMI is listed in {region}; using the plan's {pinned}")
    name, ami = newest
    return Resolved({**image, "ssm_parameter": name}, f"image: {name} ({ami})")
