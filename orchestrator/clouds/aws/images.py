"""Which AMI a catalog instance boots, who logs in, and how big its root volume starts.

The newest Deep Learning AMI "OSS Nvidia Driver GPU PyTorch" for the region, from its public
SSM parameter (drivers, CUDA and PyTorch already installed). The plan carries this release's
parameter (offline); `orch up` replaces it with the newest PyTorch release's (dlami.py).
Source: AWS DLAMI release notes, "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11
(Ubuntu 24.04) 20261009", supported instances G4dn, G5, G6, Gr6, G6e, P4, P4de, P5, P5e, P5en
(https://docs.aws.amazon.com/dlami/latest/devguide/, read 2026-12-02). P3 is not supported by
current DLAMIs, so a legacy P3 boots Canonical's Ubuntu 22.04 and `install_drivers.sh` installs
the driver.
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.base import ImageChoice

DLAMI_PYTORCH_SSM = (
    "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/"
    "latest/ami-id"
)
UBUNTU_2204_SSM = (
    "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
)


def image_for(instance: Any) -> ImageChoice:
    if instance.legacy:
        return ImageChoice({"ssm_parameter": UBUNTU_2204_SSM}, "ubuntu", 60)
    # The DLAMI's root snapshot is large (frameworks, CUDA): AWS recommends >= 100 GB.
    return ImageChoice({"ssm_parameter": DLAMI_PYTORCH_SSM}, "ubuntu", 120)
