"""PackagedCloud: the required members of `registry.Cloud` as orch's own clouds build them.

aws and aliyun are each a package `orchestrator/clouds/<name>/` with modules of the same names
and jobs: images.py (`image_for`), terraform.py (`OUTPUTS`, `tfvars`, `runtime_env`), setup.py
(`local_setup`), credentials.py (`credentials`), errors.py (`error_kind`, `CAPACITY_CODES`,
`QUOTA_CODES`), cleanup.py (`delete_tagged`); the Terraform module is
`terraform/modules/<name>_gpu` and the root-module templates `provision/templates/<name>`.
A method imports its module on first call, so `orch plan` never loads a cloud SDK.

Only required members live here. A capability (price API, zone stock, agent, instance watch,
quota; the small protocols in registry.py, asked with isinstance) is declared by each cloud
itself, so a cloud never inherits one it lacks. `list_tagged` stays with each cloud too: the
clouds filter tags differently.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from orchestrator.clouds.base import BoxRequest, ErrorKind, ImageChoice, LocalSetup
from orchestrator.resources import resource_path

if TYPE_CHECKING:
    from orchestrator.clouds.values import Credentials, TaggedResource

# The root-module templates live with the renderer (orchestrator/provision/templates/<cloud>).
_TEMPLATES = Path(__file__).resolve().parents[1] / "provision" / "templates"


class PackagedCloud:
    name: str  # also the package: orchestrator.clouds.<name>

    def _module(self, part: str) -> ModuleType:
        return importlib.import_module(f"orchestrator.clouds.{self.name}.{part}")

    def catalog_file(self) -> Path | None:
        return None  # the shipped orchestrator/catalog/data/<name>.toml

    def image_for(self, instance: Any) -> ImageChoice:
        return self._module("images").image_for(instance)

    def module_dir(self) -> Path:
        return resource_path(f"terraform/modules/{self.name}_gpu")

    def templates_dir(self) -> Path:
        return _TEMPLATES / self.name

    def outputs(self) -> tuple[str, ...]:
        return self._module("terraform").OUTPUTS

    def tfvars(self, request: BoxRequest) -> dict[str, Any]:
        return self._module("terraform").tfvars(request)

    def runtime_env(self) -> dict[str, str]:
        return self._module("terraform").runtime_env()

    def local_setup(self) -> LocalSetup:
        return self._module("setup").local_setup()

    def credentials(self) -> Credentials:
        return self._module("credentials").credentials()

    def error_kind(self, code: str) -> ErrorKind:
        return self._module("errors").error_kind(code)

    def failover_codes(self) -> tuple[str, ...]:
        errors = self._module("errors")
        return tuple(sorted(errors.CAPACITY_CODES | errors.QUOTA_CODES))

    def delete_tagged(self, region: str, resources: list[TaggedResource]) -> None:
        self._module("cleanup").delete_tagged(region, resources)
