"""AWS: a box request (plan candidate + what `orch up` decided) -> box module variables.

The renderer (orchestrator/provision/render.py) writes these values to terraform.tfvars.json
for orchestrator/provision/templates/aws/*.j2, which pass them to terraform/modules/aws_gpu.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from typing import Any

from orchestrator.clouds.aws.identity import identity_vars
from orchestrator.clouds.base import ORCH_TAG_PREFIX, BoxRequest
from orchestrator.errors import UsageError

# Root module outputs (templates/aws/outputs.tf.j2); orch and `orch check` read these.
OUTPUTS = (
    "instance_id",
    "public_ip",
    "private_ip",
    "availability_zone",
    "ami_id",
    "ssh_user",
    "security_group_id",
    "key_name",
    "nodes",  # a cluster's nodes, rank 0 first (provision/cluster.py); absent for one box
)
# terraform/modules/aws_gpu/variables.tf's rule for subnet_id: checked here, before the box
# record, its key and `terraform init`, rather than by Terraform's validation after them.
SUBNET_ID_RE = re.compile(r"subnet-[0-9a-f]{8,17}")
# IAM tags (the box's own role and instance profile carry the box's tags, iam.tf) allow fewer
# characters than EC2's: key [\p{L}\p{Z}\p{N}_.:/=+\-@]+, value the same or empty (IAM API
# Reference, Tag, https://docs.aws.amazon.com/IAM/latest/APIReference/API_Tag.html).
IAM_TAG_PUNCTUATION = frozenset("_.:/=+-@")
IAM_TAG_CHARACTERS = "letters, digits, spaces and _ . : / = + - @"


def image_vars(image: dict[str, Any]) -> dict[str, Any]:
    """Plan `image` dict -> the module's image_source and matching variable."""
    if not isinstance(image, dict):
        raise UsageError("plan candidate's image is not an object")
    if image.get("id"):
        return {"image_source": "id", "ami_id": str(image["id"])}
    if image.get("ssm_parameter"):
        return {"image_source": "ssm_parameter", "ami_ssm_parameter": str(image["ssm_parameter"])}
    if image.get("name_filter") or image.get("name_regex"):
        owners = image.get("owners") or ["amazon"]
        if isinstance(owners, str):
            owners = [o.strip() for o in owners.split(",") if o.strip()]
        return {
            "image_source": "name_filter",
            "ami_name_filter": image.get("name_filter"),
            "ami_name_regex": image.get("name_regex"),
            "ami_owners": [str(o) for o in owners],
        }
    raise UsageError(
        f"plan image {json.dumps(image)} names no AMI",
        hint="expected one of id, ssm_parameter, name_filter or name_regex",
    )


def cluster_vars(candidate: Any) -> dict[str, Any]:
    """node_count, and for a cluster every EFA interface its type has (the catalog's figure);
    nothing for one box, so its terraform.tfvars.json stays as it was."""
    nodes = int(getattr(candidate, "nodes", 1) or 1)
    if nodes == 1:
        return {}
    from orchestrator.catalog import find_instance

    try:
        efa = find_instance("aws", candidate.instance_type).efa_interfaces
    except UsageError:
        efa = 0  # a type the catalog does not list: plain TCP between the nodes
    return {"node_count": nodes, "efa_interfaces": efa}


def tfvars(request: BoxRequest) -> dict[str, Any]:
    """AWS: the values of the box root module's variables (see templates/aws/variables.tf.j2)."""
    candidate = request.candidate
    values: dict[str, Any] = {
        "region": candidate.region,
        "default_tags": request.orch_tags(),
        "name": request.name,
        "owner": request.owner,
        "expires_at": request.expires_at or "",
        "instance_type": candidate.instance_type,
        **image_vars(candidate.image),
        "root_volume_gib": int(candidate.root_volume_gib),
        "market": candidate.market,
        "user_data": request.user_data,
        "ssh_public_key": request.ssh_public_key,
        "ssh_user": candidate.ssh_user,
        "ssh_ingress_cidrs": list(request.ssh_ingress_cidrs),
        "allow_world_ssh": bool(request.allow_world_ssh),
        "tags": dict(request.tags),
        **identity_vars(getattr(request, "identity", None)),
    }
    values.update(cluster_vars(candidate))
    if values.get("create_iam_instance_profile"):
        check_iam_tags(request.tags, request.owner)
    if candidate.market == "spot" and request.spot_max_price is not None:
        values["spot_max_price"] = f"{request.spot_max_price:.4f}".rstrip("0").rstrip(".")
    if request.subnet_id:
        values["subnet_id"] = check_subnet_id(request.subnet_id)
    elif request.zone:
        values["zone_id"] = request.zone
    return values


def iam_tag_text(text: str) -> bool:
    return all(unicodedata.category(ch)[0] in "LZN" or ch in IAM_TAG_PUNCTUATION for ch in text)


def check_iam_tags(tags: dict[str, str], owner: str) -> None:
    """The box's tags as IAM takes them, when the module creates the box's role: checked before
    the box record, its key and `terraform init`, not refused by CreateRole mid-apply (the
    module's own precondition, iam.tf, says the same at plan time)."""
    if not iam_tag_text(owner):
        raise UsageError(
            f"ORCH_OWNER {owner[:40]!r}: the box's IAM role carries it as its orch:owner tag, "
            f"and IAM tag values hold only {IAM_TAG_CHARACTERS}"
        )
    for key, value in tags.items():
        if not iam_tag_text(key) or not iam_tag_text(value):
            option = "tag" if key.startswith(ORCH_TAG_PREFIX) else "--tag"  # a pool's own
            raise UsageError(
                f"{option} {key[:40]!r}: the box's IAM role carries its tags, and IAM tag keys "
                f"and values hold only {IAM_TAG_CHARACTERS}"
            )


def check_subnet_id(subnet_id: str) -> str:
    if not isinstance(subnet_id, str) or not SUBNET_ID_RE.fullmatch(subnet_id):
        raise UsageError(
            f"--subnet-id {str(subnet_id)[:60]!r} is not a subnet id",
            hint="expected e.g. subnet-0123456789abcdef0",
        )
    return subnet_id


def runtime_env() -> dict[str, str]:
    """Extra environment for Terraform, derived from standard variables at each run."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        return {"TF_VAR_aws_skip_checks": "true"}
    return {}
