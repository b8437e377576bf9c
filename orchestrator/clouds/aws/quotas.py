"""AWS: the account's vCPU quota for an EC2 instance family and market (`orch doctor --online`).

EC2 limits running instances in vCPUs per instance class and market: on-demand per class
("Running On-Demand G and VT instances", "Running On-Demand P instances"), spot per class or
generation ("All G and VT Spot Instance Requests", "All P4, P3 and P2 Spot Instance Requests",
"All P5 Spot Instance Requests")
(https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html).
Quota codes are not documented as stable per family, so the quota is found by its name:
ListAWSDefaultServiceQuotas(ServiceCode="ec2"), all pages, gives every EC2 quota's code, name
and default value; GetServiceQuota(ServiceCode, QuotaCode) then gives the value applied to this
account, or NoSuchResourceException when none was ever applied (the default holds)
(https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_ListAWSDefaultServiceQuotas.html,
https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html).

What is in use counts against the limit: EC2 measures each quota in the vCPUs of the account's
instances of that class and market in the region, so what a new launch may add is the limit
minus the vCPUs of those already running (EC2 instance quotas,
https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html; for spot, the
vCPUs running spot instances use or open spot requests will use, "Spot Instance quotas",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html). `vcpus_in_use`
sums them: DescribeInstances, all pages, filtered on instance-state-name pending and running
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html); an
instance falls under the quota its type matches best (`best_quota`, as the launch's own type
does) and under a spot quota when its InstanceLifecycle is "spot", an on-demand one otherwise;
its vCPUs are CpuOptions' CoreCount x ThreadsPerCore, or, where EC2 leaves CpuOptions out,
the type's VCpuInfo.DefaultVCpus from DescribeInstanceTypes
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CpuOptions.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_VCpuInfo.html). Open spot requests
not yet fulfilled are not counted.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.values import VcpuQuota

SERVICE_CODE = "ec2"
_defaults: dict[str, list[dict[str, Any]]] = {}  # region -> EC2's default quotas (per process)
_applied: dict[tuple[str, str], VcpuQuota] = {}  # (region, code) -> the value read
USAGE_TTL_S = 30.0  # how long one DescribeInstances listing answers for a region
_type_vcpus: dict[str, int] = {}  # instance type -> VCpuInfo.DefaultVCpus (per process)
LIVE_STATES = ("pending", "running")


@dataclass(frozen=True, slots=True)
class Running:
    """One pending or running instance, as its quota sees it."""

    instance_type: str
    spot: bool  # InstanceLifecycle "spot"
    vcpus: int | None  # CpuOptions' CoreCount x ThreadsPerCore; None when EC2 left it out


_running: dict[str, tuple[float, list[Running]]] = {}  # region -> (monotonic time, instances)


def family_of(instance_type: str) -> tuple[str, str]:
    """("P", "P4") for p4d.24xlarge, ("G", "G5") for g5.xlarge, ("P", "P6") for p6-b200.48xlarge."""
    family = instance_type.split(".")[0].lower()
    generation = re.match(r"[a-z]+\d*", family)
    text = generation.group(0).upper() if generation else family.upper()
    return text[:1], text


def match_score(quota_name: str, instance_type: str, spot: bool) -> int:
    """2: the quota names the type's generation (P5), 1: its class (P, or G for G and VT),
    0: another quota."""
    if spot:
        found = re.fullmatch(r"All (.+) Spot Instance Requests", quota_name)
    else:
        found = re.fullmatch(r"Running On-Demand (.+) instances", quota_name)
    if not found:
        return 0
    tokens = set(re.findall(r"\b[A-Z][A-Za-z]*\d*\b", found.group(1)))
    letter, generation = family_of(instance_type)
    if generation in tokens:
        return 2
    return 1 if letter in tokens else 0


def _default_quotas(region: str) -> list[dict[str, Any]]:
    if region not in _defaults:
        quotas = client("service-quotas", region)
        pages = quotas.get_paginator("list_aws_default_service_quotas").paginate(
            ServiceCode=SERVICE_CODE, PaginationConfig={"PageSize": 100}
        )
        _defaults[region] = [
            q for page in call("ListAWSDefaultServiceQuotas", list, pages) for q in page["Quotas"]
        ]
    return _defaults[region]


def best_quota(
    quotas: list[dict[str, Any]], instance_type: str, spot: bool
) -> dict[str, Any] | None:
    """The quota of `quotas` that limits `instance_type` in that market; None when none does."""
    scored = [
        (score, quota)
        for quota in quotas
        if (score := match_score(str(quota.get("QuotaName", "")), instance_type, spot))
    ]
    if not scored:
        return None
    return max(scored, key=lambda pair: pair[0])[1]


def vcpu_quota(region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
    """The quota that limits `instance_type` in `region`, its value for this account and the
    vCPUs already in use under it (in_use None, and in_use_problem why, when they cannot be
    read); None when EC2 lists no quota of that name."""
    quota = best_quota(_default_quotas(region), instance_type, spot)
    if quota is None:
        return None
    code = str(quota["QuotaCode"])
    if (region, code) not in _applied:
        _applied[(region, code)] = _read(region, quota)
    try:
        in_use = vcpus_in_use(region, code, spot)
    except AwsError as exc:
        return replace(_applied[(region, code)], in_use_problem=exc.one_line())
    return replace(_applied[(region, code)], in_use=float(in_use))


def vcpus_in_use(region: str, code: str, spot: bool) -> int:
    """The vCPUs of the region's pending and running instances that quota `code` counts."""
    quotas = _default_quotas(region)
    under = [
        i
        for i in running_instances(region)
        if i.spot == spot
        and (quota := best_quota(quotas, i.instance_type, spot)) is not None
        and str(quota["QuotaCode"]) == code
    ]
    defaults = default_vcpus(region, sorted({i.instance_type for i in under if i.vcpus is None}))
    return sum(i.vcpus if i.vcpus is not None else defaults[i.instance_type] for i in under)


def running_instances(region: str) -> list[Running]:
    """The account's pending and running instances in `region` (one listing per USAGE_TTL_S)."""
    now = time.monotonic()
    cached = _running.get(region)
    if cached is not None and now - cached[0] < USAGE_TTL_S:
        return cached[1]
    pages = (
        client("ec2", region)
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
    )
    found: list[Running] = []
    for page in call("DescribeInstances", list, pages):
        for reservation in _list(page, "Reservations"):
            for instance in _list(reservation, "Instances"):
                running = _running_of(instance)
                if running is not None:
                    found.append(running)
    _running[region] = (now, found)
    return found


def _list(parent: Any, key: str) -> list[Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise AwsError(f"AWS DescribeInstances gave a {key} that is not a list")
    return value


def _running_of(instance: Any) -> Running | None:
    """One DescribeInstances instance, validated; None when it is not pending or running."""
    if not isinstance(instance, dict):
        raise AwsError("AWS DescribeInstances gave an instance that is not an object")
    state = instance.get("State")
    if not isinstance(state, dict) or state.get("Name") not in LIVE_STATES:
        return None
    instance_type = instance.get("InstanceType")
    if not isinstance(instance_type, str) or not instance_type:
        raise AwsError("AWS DescribeInstances gave an instance without an InstanceType")
    options = instance.get("CpuOptions")
    cores = options.get("CoreCount") if isinstance(options, dict) else None
    threads = options.get("ThreadsPerCore") if isinstance(options, dict) else None
    vcpus = cores * threads if _positive_int(cores) and _positive_int(threads) else None
    return Running(instance_type, instance.get("InstanceLifecycle") == "spot", vcpus)


def default_vcpus(region: str, instance_types: list[str]) -> dict[str, int]:
    """VCpuInfo.DefaultVCpus of each type (DescribeInstanceTypes, 100 types a request)."""
    missing = [t for t in instance_types if t not in _type_vcpus]
    ec2 = client("ec2", region)
    for start in range(0, len(missing), 100):
        pages = ec2.get_paginator("describe_instance_types").paginate(
            InstanceTypes=missing[start : start + 100]
        )
        for page in call("DescribeInstanceTypes", list, pages):
            for info in page.get("InstanceTypes") or []:
                name = info.get("InstanceType") if isinstance(info, dict) else None
                vcpu_info = info.get("VCpuInfo") if isinstance(info, dict) else None
                vcpus = vcpu_info.get("DefaultVCpus") if isinstance(vcpu_info, dict) else None
                if isinstance(name, str) and _positive_int(vcpus):
                    _type_vcpus[name] = vcpus
    unknown = [t for t in instance_types if t not in _type_vcpus]
    if unknown:
        raise AwsError(f"AWS DescribeInstanceTypes gave no vCPU count for {', '.join(unknown)}")
    return {t: _type_vcpus[t] for t in instance_types}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _read(region: str, quota: dict[str, Any]) -> VcpuQuota:
    code, name = str(quota["QuotaCode"]), str(quota["QuotaName"])
    try:
        applied = call(
            "GetServiceQuota",
            client("service-quotas", region).get_service_quota,
            ServiceCode=SERVICE_CODE,
            QuotaCode=code,
        )["Quota"]
    except AwsError as exc:
        if exc.code != "NoSuchResourceException":
            raise
        return VcpuQuota(name, code, _value(quota), "ListAWSDefaultServiceQuotas (default)")
    return VcpuQuota(name, code, _value(applied), "GetServiceQuota")


def _value(quota: dict[str, Any]) -> float | None:
    value = quota.get("Value")
    return float(value) if isinstance(value, (int, float)) else None
