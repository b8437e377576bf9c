"""Render a box's Terraform root module into its directory.

What is written (all relative to the box directory):

    main.tf, variables.tf, outputs.tf   from templates/<cloud>/*.j2: fixed HCL, no user value
    modules/<module>/                   a copy of terraform/modules/<module>, so the box dir is
                                        self-contained and `down` works after an orch upgrade
    terraform.tfvars.json               every value (names, tags, CIDRs, user data...) as JSON
    backend.s3.tfbackend.json           bucket/key/region for the S3 backend, when used

User strings reach Terraform only through JSON files, never through HCL text, so `${...}`,
`%{...}`, quotes or newlines in a tag arrive verbatim and cannot become expressions.

Clouds: the renderer is generic. The box's cloud (orchestrator.clouds.get) supplies the
templates folder, the module to copy, the output names and `tfvars(request)`, the mapping of a
RenderRequest to its variables (orchestrator/clouds/<cloud>/terraform.py for the built-ins).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import clouds
from orchestrator.clouds.base import BOX_TAG, EXPIRES_TAG, MANAGED_BY_TAG, OWNER_TAG
from orchestrator.clouds.identity import BoxIdentity
from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"  # built-in clouds' templates
RENDERED_FILES = ("main.tf", "variables.tf", "outputs.tf")
TFVARS_FILE = "terraform.tfvars.json"
BACKEND_FILE = "backend.s3.tfbackend.json"
MODULES_DIR = "modules"


@dataclass(slots=True)
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
    zone: str | None = None  # the zone `orch up` chose (None: the module picks)
    identity: BoxIdentity = field(default_factory=BoxIdentity)  # the box's own role

    def orch_tags(self) -> dict[str, str]:
        """Tags on everything a box creates: how `orch sweep` finds leftovers and expired boxes."""
        return {
            BOX_TAG: self.name,
            OWNER_TAG: self.owner,
            EXPIRES_TAG: self.expires_at or "",
            MANAGED_BY_TAG: "orch",
        }


# ------------------------------------------------------------------------------ rendering


def cloud_tfvars(request: RenderRequest) -> dict[str, Any]:
    return clouds.get(request.candidate.cloud).tfvars(request)


def cloud_runtime_env(cloud: str) -> dict[str, str]:
    return dict(clouds.get(cloud).runtime_env())


def render_hcl(cloud: str, backend: str) -> dict[str, str]:
    """The fixed HCL files of a root module: depends on cloud and backend kind only."""
    import jinja2  # only provisioning commands pay for it

    spec = clouds.get(cloud)
    if backend not in ("local", "s3"):
        raise UsageError(f"unknown state backend {backend!r}")
    module = spec.module_dir().name
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(spec.templates_dir()),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    context = {
        "backend": backend,
        "module_name": module,
        "module_source": f"./{MODULES_DIR}/{module}",
        "outputs": list(spec.outputs()),
    }
    try:
        return {name: env.get_template(f"{name}.j2").render(context) for name in RENDERED_FILES}
    except jinja2.TemplateNotFound as exc:
        raise OrchError(f"orch installation is incomplete: template {cloud}/{exc.name}") from None


def copy_module(cloud: str, directory: Path) -> Path:
    source = clouds.get(cloud).module_dir()
    target = directory / MODULES_DIR / source.name
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
