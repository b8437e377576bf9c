"""Render a box's Terraform root module into its directory.

What is written (all relative to the box directory):

    main.tf, variables.tf, outputs.tf   from templates/<cloud>/*.j2: fixed HCL, no user value
    modules/<module>/                   a copy of terraform/modules/<module>, so the box dir is
                                        self-contained and `down` works after an orch upgrade
    terraform.tfvars.json               every value (names, tags, CIDRs, user data...) as JSON
    backend.s3.tfbackend.json           bucket/key/region for the S3 backend, when used

User strings reach Terraform only through JSON files, never through HCL text, so `${...}`,
`%{...}`, quotes or newlines in a tag arrive verbatim and cannot become expressions.

Clouds: each has templates/<cloud>/ and a function mapping a RenderRequest to its variables.
AWS's mapping is here; Aliyun's lives in orchestrator/provision/aliyun_vars.py, which must
define `tfvars(request) -> dict` and may define `runtime_env() -> dict` (extra environment,
such as TF_VAR_ knobs derived from standard variables) and `OUTPUTS` (root output names).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate
from orchestrator.resources import resource_path

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
RENDERED_FILES = ("main.tf", "variables.tf", "outputs.tf")
TFVARS_FILE = "terraform.tfvars.json"
BACKEND_FILE = "backend.s3.tfbackend.json"
MODULES_DIR = "modules"
# Outputs every cloud module provides (orch and `orch check` read these).
COMMON_OUTPUTS = (
    "instance_id",
    "public_ip",
    "private_ip",
    "availability_zone",
    "ami_id",
    "ssh_user",
    "security_group_id",
    "key_name",
)


@dataclass
class RenderRequest:
    """Everything that varies between boxes; the plan row plus what `orch up` decided."""

    name: str
    owner: str
    candidate: Candidate
    ssh_public_key: str
    ssh_ingress_cidrs: list[str]
    user_data: str = ""
    expires_at: str | None = None
    allow_world_ssh: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    backend: str = "local"  # "local" | "s3"
    spot_max_price: float | None = None
    subnet_id: str | None = None

    def orch_tags(self) -> dict[str, str]:
        """Tags on everything a box creates: how `orch sweep` finds leftovers and expired boxes."""
        return {
            "orch:box": self.name,
            "orch:owner": self.owner,
            "orch:expires-at": self.expires_at or "",
            "orch:managed-by": "orch",
        }


@dataclass(frozen=True)
class CloudSpec:
    module: str  # folder under terraform/modules
    vars_module: str  # python module with tfvars(request) [and runtime_env(), OUTPUTS]


CLOUDS: dict[str, CloudSpec] = {
    "aws": CloudSpec(module="aws_gpu", vars_module="orchestrator.provision.render"),
    "aliyun": CloudSpec(module="aliyun_gpu", vars_module="orchestrator.provision.aliyun_vars"),
}


def cloud_spec(cloud: str) -> CloudSpec:
    try:
        return CLOUDS[cloud]
    except KeyError:
        raise UsageError(f"unknown cloud {cloud!r} (expected one of {', '.join(CLOUDS)})") from None


def _vars_module(cloud: str) -> Any:
    name = cloud_spec(cloud).vars_module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise OrchError(f"orch cannot provision {cloud} boxes yet: {name} is missing") from None
        raise


# ------------------------------------------------------------------------------ AWS mapping


def aws_image_vars(image: dict[str, Any]) -> dict[str, Any]:
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


def tfvars(request: RenderRequest) -> dict[str, Any]:
    """AWS: the values of the box root module's variables (see templates/aws/variables.tf.j2)."""
    candidate = request.candidate
    values: dict[str, Any] = {
        "region": candidate.region,
        "default_tags": request.orch_tags(),
        "name": request.name,
        "owner": request.owner,
        "expires_at": request.expires_at or "",
        "instance_type": candidate.instance_type,
        **aws_image_vars(candidate.image),
        "root_volume_gib": int(candidate.root_volume_gib),
        "market": candidate.market,
        "user_data": request.user_data,
        "ssh_public_key": request.ssh_public_key,
        "ssh_user": candidate.ssh_user,
        "ssh_ingress_cidrs": list(request.ssh_ingress_cidrs),
        "allow_world_ssh": bool(request.allow_world_ssh),
        "tags": dict(request.tags),
    }
    if candidate.market == "spot" and request.spot_max_price is not None:
        values["spot_max_price"] = f"{request.spot_max_price:.4f}".rstrip("0").rstrip(".")
    if request.subnet_id:
        values["subnet_id"] = request.subnet_id
    return values


def runtime_env() -> dict[str, str]:
    """AWS: extra environment for Terraform, derived from standard variables at each run."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        return {"TF_VAR_aws_skip_checks": "true"}
    return {}


OUTPUTS = COMMON_OUTPUTS


# ------------------------------------------------------------------------------ rendering


def cloud_tfvars(request: RenderRequest) -> dict[str, Any]:
    return _vars_module(request.candidate.cloud).tfvars(request)


def cloud_runtime_env(cloud: str) -> dict[str, str]:
    hook = getattr(_vars_module(cloud), "runtime_env", None)
    return dict(hook()) if hook else {}


def render_hcl(cloud: str, backend: str) -> dict[str, str]:
    """The fixed HCL files of a root module: depends on cloud and backend kind only."""
    import jinja2  # only provisioning commands pay for it

    spec = cloud_spec(cloud)
    if backend not in ("local", "s3"):
        raise UsageError(f"unknown state backend {backend!r}")
    outputs = getattr(_vars_module(cloud), "OUTPUTS", COMMON_OUTPUTS)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR / cloud),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    context = {
        "backend": backend,
        "module_name": spec.module,
        "module_source": f"./{MODULES_DIR}/{spec.module}",
        "outputs": list(outputs),
    }
    try:
        return {name: env.get_template(f"{name}.j2").render(context) for name in RENDERED_FILES}
    except jinja2.TemplateNotFound as exc:
        raise OrchError(f"orch installation is incomplete: template {cloud}/{exc.name}") from None


def copy_module(cloud: str, directory: Path) -> Path:
    module = cloud_spec(cloud).module
    source = resource_path(f"terraform/modules/{module}")
    target = directory / MODULES_DIR / module
    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "README.md")
    )
    return target


def render_box(directory: Path, request: RenderRequest) -> list[str]:
    """(Re)write the root module for `request` into `directory`; returns the files written.

    Terraform's working data (.terraform/, the lock file, local state) is left alone, so a
    re-render before a re-apply or a destroy keeps what Terraform already knows.
    """
    values = cloud_tfvars(request)
    write_code(directory, request.candidate.cloud, request.backend)
    write_json(directory / TFVARS_FILE, values)
    return [*RENDERED_FILES, TFVARS_FILE, MODULES_DIR]


def write_code(directory: Path, cloud: str, backend: str) -> None:
    """Write the root module's HCL and a copy of the cloud's module from this installation.

    Only this installation's code is ever run: a box restored from a remote bundle gets its
    values (terraform.tfvars.json) from the bundle, never HCL.
    """
    hcl = render_hcl(cloud, backend)
    directory.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(directory / MODULES_DIR, ignore_errors=True)
    copy_module(cloud, directory)
    for name, text in hcl.items():
        (directory / name).write_text(text)


def write_json(path: Path, data: Any) -> None:
    # json.dumps escapes quotes, backslashes and control characters; Terraform reads the
    # result as literal strings (no template interpolation happens in .tfvars.json).
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
