"""alicloud_instance (ECS RunInstances / DescribeInstances / DeleteInstance).

Schema: a subset of alicloud/resource_alicloud_instance.go at v1.289.0. Flow as in the real
provider: RunInstances with a flat parameter map, wait for Status "Running", read back
(DescribeInstances + DescribeDisks for the system disk); delete with DeleteInstance Force=true
and wait until DescribeInstances no longer returns it. In-place updates: tags
(TagResources/UntagResources) and auto_release_time (ModifyInstanceAutoReleaseTime).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from datetime import UTC, datetime
from typing import Any

from tests.sim.alicloud_provider.client import ApiError, retry, tags_from, wait_for
from tests.sim.alicloud_provider.resources.base import BaseResource, known
from tests.sim.alicloud_provider.schema import Bool, Map, Number, Set, String, attr, schema

CREATE_TIMEOUT_S = 600  # Timeouts.Create: 10 minutes
DELETE_TIMEOUT_S = 1200  # Timeouts.Delete: 20 minutes
DISK_CATEGORIES = [
    "all",
    "cloud",
    "ephemeral_ssd",
    "cloud_essd",
    "cloud_efficiency",
    "cloud_ssd",
    "local_disk",
    "cloud_auto",
    "cloud_essd_entry",
]


class Instance(BaseResource):
    TAGS = ("ecs", "instance")

    @classmethod
    def get_name(cls) -> str:
        return "instance"

    @classmethod
    def get_schema(cls):
        # Each line: the Go schema's flags for that key in resource_alicloud_instance.go.
        return schema(
            attr("availability_zone", String(), optional=True, computed=True, force_new=True),
            attr("image_id", String(), optional=True, computed=True),
            attr("instance_type", String(), optional=True, computed=True),
            attr("security_groups", Set(String()), optional=True, computed=True),
            attr("instance_name", String(), optional=True, computed=True),
            attr("description", String(), optional=True, computed=True),
            attr("internet_charge_type", String(), optional=True, computed=True),
            attr("internet_max_bandwidth_out", Number(), optional=True, computed=True),
            attr("host_name", String(), optional=True, computed=True),
            attr("system_disk_category", String(), optional=True, computed=True, force_new=True),
            attr("system_disk_size", Number(), optional=True, computed=True),
            attr("system_disk_encrypted", Bool(), optional=True, computed=True, force_new=True),
            attr("system_disk_performance_level", String(), optional=True, computed=True),
            attr("system_disk_id", String(), computed=True),
            attr("vpc_id", String(), optional=True, computed=True),
            attr("vswitch_id", String(), optional=True, computed=True),
            attr("private_ip", String(), optional=True, computed=True),
            attr("instance_charge_type", String(), optional=True, computed=True),
            attr("public_ip", String(), computed=True),
            attr("status", String(), optional=True, computed=True),
            attr("user_data", String(), optional=True),
            attr("key_name", String(), optional=True, computed=True),
            attr("spot_strategy", String(), optional=True, computed=True, force_new=True),
            attr("spot_price_limit", Number(), optional=True, computed=True, force_new=True),
            attr("deletion_protection", Bool(), optional=True),
            attr(
                "security_enhancement_strategy",
                String(),
                optional=True,
                computed=True,
                force_new=True,
            ),
            attr("tags", Map(String()), optional=True),
            # deployment_set_id: Optional (RunInstances DeploymentSetId; moved in place with
            # ModifyInstanceDeployment upstream, which this stand-in does not do).
            attr("deployment_set_id", String(), optional=True),
            attr("auto_release_time", String(), optional=True),
            attr("http_tokens", String(), optional=True, computed=True),
            attr("http_endpoint", String(), optional=True, computed=True),
            attr("cpu", Number(), computed=True),
            attr("memory", Number(), computed=True),
            attr("os_name", String(), computed=True),
            attr("os_type", String(), computed=True),
            attr("primary_ip_address", String(), computed=True),
            attr("create_time", String(), computed=True),
            attr("start_time", String(), computed=True),
            attr("expired_time", String(), computed=True),
        )

    # ---------------------------------------------------------------- validation

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_match(diags, config, "instance_type", r"^ecs\..*", "prefix must be 'ecs.'")
        self.check_in(diags, config, "system_disk_category", DISK_CATEGORIES)
        self.check_in(diags, config, "internet_charge_type", ["PayByBandwidth", "PayByTraffic"])
        self.check_in(diags, config, "instance_charge_type", ["PrePaid", "PostPaid"])
        self.check_in(
            diags, config, "spot_strategy", ["NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit"]
        )
        self.check_in(diags, config, "status", ["Running", "Stopped"])
        self.check_in(diags, config, "http_tokens", ["optional", "required"])
        self.check_in(diags, config, "http_endpoint", ["enabled", "disabled"])
        self.check_in(diags, config, "system_disk_performance_level", ["PL0", "PL1", "PL2", "PL3"])
        self.check_in(diags, config, "security_enhancement_strategy", ["Active", "Deactive"])
        self.check_len(diags, config, "instance_name", 2, 128)
        self.check_len(diags, config, "description", 2, 256)
        if config.get("image_id") is None:
            diags.add_error(
                '"image_id": one of `image_id,launch_template_id,launch_template_name`'
                " must be specified"
            )

    # ---------------------------------------------------------------- reading

    def _describe(self, instance_id: str) -> dict[str, Any] | None:
        body = self.client.ecs("DescribeInstances", {"InstanceIds": json.dumps([instance_id])})
        items = (body.get("Instances") or {}).get("Instance") or []
        return items[0] if items else None

    def _read(self, instance_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        item = self._describe(instance_id)
        if item is None:
            return None
        disks = self.client.ecs("DescribeDisks", {"InstanceId": instance_id, "DiskType": "system"})
        disk_items = (disks.get("Disks") or {}).get("Disk") or []
        disk = disk_items[0] if disk_items else {}
        vpc = item.get("VpcAttributes") or {}
        private = ((vpc.get("PrivateIpAddress") or {}).get("IpAddress")) or [""]
        public = ((item.get("PublicIpAddress") or {}).get("IpAddress")) or [""]
        metadata = item.get("MetadataOptions") or {}
        interfaces = (item.get("NetworkInterfaces") or {}).get("NetworkInterface") or []
        primary = next((n for n in interfaces if n.get("Type") == "Primary"), {})
        return {
            **prior,
            "id": item["InstanceId"],
            "availability_zone": item.get("ZoneId", ""),
            "image_id": item.get("ImageId", ""),
            "instance_type": item.get("InstanceType", ""),
            "security_groups": list(
                (item.get("SecurityGroupIds") or {}).get("SecurityGroupId") or []
            ),
            "instance_name": item.get("InstanceName", ""),
            "description": item.get("Description", ""),
            "internet_charge_type": item.get("InternetChargeType", ""),
            "internet_max_bandwidth_out": item.get("InternetMaxBandwidthOut", 0),
            "host_name": item.get("HostName", ""),
            "system_disk_category": disk.get("Category", prior.get("system_disk_category")),
            "system_disk_size": disk.get("Size", prior.get("system_disk_size")),
            "system_disk_encrypted": bool(disk.get("Encrypted", False)),
            "system_disk_performance_level": disk.get("PerformanceLevel", ""),
            "system_disk_id": disk.get("DiskId", ""),
            "vpc_id": vpc.get("VpcId", ""),
            "vswitch_id": vpc.get("VSwitchId", ""),
            "private_ip": private[0],
            "instance_charge_type": item.get("InstanceChargeType", ""),
            "public_ip": public[0],
            "status": item.get("Status", ""),
            "key_name": item.get("KeyPairName", ""),
            "spot_strategy": item.get("SpotStrategy", "NoSpot"),
            "spot_price_limit": item.get("SpotPriceLimit", 0.0),
            # Upstream sets DescribeInstances' DeploymentSetId; "" where none is null here, as
            # SDKv2 treats the two alike (the tf package would plan "" -> null as a change).
            "deployment_set_id": item.get("DeploymentSetId") or prior.get("deployment_set_id"),
            "security_enhancement_strategy": prior.get("security_enhancement_strategy")
            if known(prior.get("security_enhancement_strategy"))
            else "Active",
            "tags": tags_from(item.get("Tags"))
            or (prior.get("tags") if prior.get("tags") == {} else None),
            "auto_release_time": _release_time(
                item.get("AutoReleaseTime", ""), prior.get("auto_release_time")
            ),
            "http_tokens": metadata.get("HttpTokens", ""),
            "http_endpoint": metadata.get("HttpEndpoint", ""),
            "cpu": item.get("Cpu", 0),
            "memory": item.get("Memory", 0),
            "os_name": item.get("OSName", ""),
            "os_type": item.get("OSType", ""),
            "primary_ip_address": primary.get("PrimaryIpAddress", private[0]),
            "create_time": item.get("CreationTime", ""),
            "start_time": item.get("StartTime", ""),
            "expired_time": item.get("ExpiredTime", ""),
        }

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_instance", exc)
            return current

    # ---------------------------------------------------------------- create

    def create(self, ctx, planned):
        def given(name: str) -> Any:
            value = planned.get(name)
            return value if known(value) else None

        user_data = given("user_data")
        if user_data:
            try:  # the real provider sends base64 as is and encodes anything else
                base64.b64decode(user_data, validate=True)
            except (binascii.Error, ValueError):
                user_data = base64.b64encode(user_data.encode()).decode()
        request: dict[str, Any] = {
            "ClientToken": f"tf-{time.time_ns()}",
            "InstanceType": given("instance_type"),
            "ImageId": given("image_id"),
            "ZoneId": given("availability_zone"),
            "SystemDisk.Category": given("system_disk_category"),
            "SystemDisk.Size": given("system_disk_size"),
            "SystemDisk.Encrypted": given("system_disk_encrypted"),
            "SystemDisk.PerformanceLevel": given("system_disk_performance_level"),
            "InstanceName": given("instance_name"),
            "Description": given("description"),
            "InternetChargeType": given("internet_charge_type"),
            "InternetMaxBandwidthOut": given("internet_max_bandwidth_out"),
            "HostName": given("host_name"),
            "InstanceChargeType": given("instance_charge_type"),
            "UserData": user_data,
            "KeyPairName": given("key_name"),
            "SecurityEnhancementStrategy": given("security_enhancement_strategy"),
            "AutoReleaseTime": given("auto_release_time") or None,
            "DeletionProtection": given("deletion_protection"),
            "HttpTokens": given("http_tokens"),
            "HttpEndpoint": given("http_endpoint"),
            "VSwitchId": given("vswitch_id"),
            "PrivateIpAddress": given("private_ip"),
            "SecurityGroupIds": given("security_groups"),
            "DeploymentSetId": given("deployment_set_id"),
        }
        if (given("instance_charge_type") or "PostPaid") == "PostPaid":
            request["SpotStrategy"] = given("spot_strategy")
            request["SpotPriceLimit"] = given("spot_price_limit")
        tags = given("tags") or {}
        for index, (key, value) in enumerate(tags.items(), start=1):
            request[f"Tag.{index}.Key"] = key
            request[f"Tag.{index}.Value"] = value
        try:
            body = retry(
                lambda: self.client.ecs("RunInstances", request),
                codes=("IncorrectVSwitchStatus", "Throttling"),
                timeout_s=CREATE_TIMEOUT_S,
            )
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_instance (RunInstances)", exc)
            return None
        instance_id = ((body.get("InstanceIdSets") or {}).get("InstanceIdSet") or [None])[0]
        if not instance_id:
            ctx.diagnostics.add_error("RunInstances returned no instance id")
            return None
        try:
            # Like the real provider, keep waiting for Running even if Terraform was asked to
            # stop: the instance exists now, and returning its state is what lets `destroy`
            # find it later.
            wait_for(
                lambda: self._describe(instance_id),
                lambda item: item is not None and item.get("Status") == "Running",
                timeout_s=CREATE_TIMEOUT_S,
            )
            return self._read(instance_id, planned)
        except (ApiError, TimeoutError) as exc:
            self.api_error(ctx.diagnostics, f"waiting for alicloud_instance {instance_id}", exc)
            # Record what exists so that it is tainted and destroyed, never leaked.
            return _partial_state(planned, instance_id)

    # ---------------------------------------------------------------- update

    def update(self, ctx, current, planned):
        instance_id = current["id"]
        in_place = ("tags", "auto_release_time")
        unsupported = sorted(
            k
            for k in planned
            if k not in in_place and known(planned.get(k)) and planned.get(k) != current.get(k)
        )
        if unsupported:
            ctx.diagnostics.add_error(
                f"alicloud_instance: the test provider cannot change {', '.join(unsupported)}"
                " in place"
            )
            return current
        try:
            self.update_tags(instance_id, current.get("tags"), planned.get("tags"))
            if current.get("auto_release_time") != planned.get("auto_release_time"):
                self.client.ecs(
                    "ModifyInstanceAutoReleaseTime",
                    {
                        "InstanceId": instance_id,
                        "AutoReleaseTime": planned.get("auto_release_time") or "",
                    },
                )
            state = self._read(instance_id, planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "updating alicloud_instance", exc)
            return current
        return state if state is not None else current

    # ---------------------------------------------------------------- delete

    def delete(self, ctx, current):
        instance_id = current["id"]
        try:
            retry(
                lambda: self.client.ecs(
                    "DeleteInstance", {"InstanceId": instance_id, "Force": True}
                ),
                codes=(
                    "IncorrectInstanceStatus",
                    "IncorrectInstanceStatus.Initializing",
                    "Throttling",
                ),
                timeout_s=DELETE_TIMEOUT_S,
            )
        except ApiError as exc:
            if exc.code not in ("InvalidInstanceId.NotFound", "Forbidden.InstanceNotFound"):
                self.api_error(ctx.diagnostics, "deleting alicloud_instance", exc)
                return current
        try:
            wait_for(
                lambda: self._describe(instance_id),
                lambda item: item is None,
                timeout_s=DELETE_TIMEOUT_S,
            )
        except (ApiError, TimeoutError) as exc:
            self.api_error(
                ctx.diagnostics, f"waiting for alicloud_instance {instance_id} to go", exc
            )
            return current
        return None


def _release_time(api_value: str, prior: Any) -> str | None:
    """Keep the configured spelling when it names the same minute (the real DiffSuppressFunc)."""
    if not api_value:
        return "" if prior == "" else None
    if known(prior) and prior:
        try:
            same = _minute(prior) == _minute(api_value)
        except ValueError:
            same = False
        if same:
            return prior
    return api_value


def _minute(text: str) -> datetime:
    for pattern in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%MZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC, second=0)
        except ValueError:
            continue
    raise ValueError(text)


def _partial_state(planned: dict[str, Any], instance_id: str) -> dict[str, Any]:
    """A wholly known state for an instance whose creation did not finish."""
    state = {k: (None if not known(v) else v) for k, v in planned.items()}
    state["id"] = instance_id
    return state
