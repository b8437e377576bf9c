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
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.values import VcpuQuota

SERVICE_CODE = "ec2"
_defaults: dict[str, list[dict[str, Any]]] = {}  # region -> EC2's default quotas (per process)
_applied: dict[tuple[str, str], VcpuQuota] = {}  # (region, code) -> the value read


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


def vcpu_quota(region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
    """The quota that limits `instance_type` in `region` and its value for this account; None
    when EC2 lists no quota of that name."""
    scored = [
        (score, quota)
        for quota in _default_quotas(region)
        if (score := match_score(str(quota.get("QuotaName", "")), instance_type, spot))
    ]
    if not scored:
        return None
    _, quota = max(scored, key=lambda pair: pair[0])
    code = str(quota["QuotaCode"])
    if (region, code) not in _applied:
        _applied[(region, code)] = _read(region, quota)
    return _applied[(region, code)]


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
