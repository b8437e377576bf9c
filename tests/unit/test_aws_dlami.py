"""Which image `orch up` boots for a plan's DLAMI parameter (orchestrator/clouds/aws/dlami.py);
the newest-of-many choice against SSM's paged answers is in tests/e2e/test_aws_dlami.py."""

from __future__ import annotations

import pytest

from orchestrator.clouds.aws import dlami
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.aws.images import DLAMI_PYTORCH_SSM, UBUNTU_2204_SSM


def test_only_pytorch_dlami_parameters_are_moving_targets():
    assert dlami.resolve("us-east-1", {"ssm_parameter": UBUNTU_2204_SSM}) is None
    assert dlami.resolve("us-east-1", {"id": "ami-0123456789abcdef0"}) is None
    assert dlami._version(DLAMI_PYTORCH_SSM) == (2, 11, 24, 4)
    base = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-ubuntu-24.04/latest/ami-id"
    assert dlami._version(base) is None
    # Versions compare as numbers: 2.10 is newer than 2.9.
    newer = DLAMI_PYTORCH_SSM.replace("2.11", "2.10").replace("24.04", "22.04")
    older = DLAMI_PYTORCH_SSM.replace("2.11", "2.9")
    assert dlami._version(newer) > dlami._version(older)


def test_a_listing_the_account_may_not_make_keeps_the_plan_s_parameter(monkeypatch):
    def denied(region: str) -> None:
        raise AwsError(
            "AWS GetParametersByPath failed: AccessDeniedException: no", "AccessDeniedException"
        )

    monkeypatch.setattr(dlami, "newest_pytorch", denied)
    resolved = dlami.resolve("eu-west-1", {"ssm_parameter": DLAMI_PYTORCH_SSM})
    assert resolved.image == {"ssm_parameter": DLAMI_PYTORCH_SSM}
    assert resolved.note.startswith("cannot list the DLAMIs in eu-west-1 (AccessDeniedException)")


@pytest.mark.parametrize("found", [None, ("/x", "ami-1")])
def test_the_note_says_what_was_chosen(monkeypatch, found):
    monkeypatch.setattr(dlami, "newest_pytorch", lambda region: found)
    resolved = dlami.resolve("us-east-1", {"ssm_parameter": DLAMI_PYTORCH_SSM})
    if found is None:
        assert resolved.image == {"ssm_parameter": DLAMI_PYTORCH_SSM}
        assert "no PyTorch DLAMI is listed in us-east-1" in resolved.note
    else:
        assert resolved.image == {"ssm_parameter": "/x"} and resolved.note == "image: /x (ami-1)"
