"""alicloud_ecs_deployment_set (ECS CreateDeploymentSet / DescribeDeploymentSets /
DeleteDeploymentSet).

Schema: a subset of alicloud/resource_alicloud_ecs_deployment_set.go at v1.289.0 (strategy
O+C+ForceNew, one of Availability, AvailabilityGroup, LowLatency; deployment_set_name O,
`^([\\w\\\\:\\-]){2,128}$`; description O, 2..256 characters; on_unable_to_redeploy_failed_instance
O, CancelMembershipAndStart or KeepStopped). No tags: the resource has none upstream, and
CreateDeploymentSet takes none. Read sets strategy from DeploymentStrategy and description from
DeploymentSetDescription, as upstream does; a set gone from DescribeDeploymentSets is gone.
Delete: DeleteDeploymentSet once (upstream retries only NeedRetry's throttling codes, so a set
that still holds instances fails with DependencyViolation.NotEmpty).
"""

from __future__ import annotations

import json
from typing import Any

from tests.sim.alicloud_provider.client import ApiError
from tests.sim.alicloud_provider.resources.base import BaseResource, known
from tests.sim.alicloud_provider.schema import String, attr, schema

STRATEGIES = ["Availability", "AvailabilityGroup", "LowLatency"]


class EcsDeploymentSet(BaseResource):
    @classmethod
    def get_name(cls) -> str:
        return "ecs_deployment_set"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("strategy", String(), optional=True, computed=True, force_new=True),
            attr("deployment_set_name", String(), optional=True),
            attr("description", String(), optional=True),
            attr("on_unable_to_redeploy_failed_instance", String(), optional=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_in(diags, config, "strategy", STRATEGIES)
        self.check_match(
            diags, config, "deployment_set_name", r"^([\w\\:\-]){2,128}$", "2-128 [\\w:-]"
        )
        self.check_len(diags, config, "description", 2, 256)
        self.check_in(
            diags,
            config,
            "on_unable_to_redeploy_failed_instance",
            ["CancelMembershipAndStart", "KeepStopped"],
        )

    def _read(self, ds_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        body = self.client.ecs(
            "DescribeDeploymentSets", {"DeploymentSetIds": json.dumps([ds_id]), "PageSize": 50}
        )
        found = [
            d
            for d in (body.get("DeploymentSets") or {}).get("DeploymentSet") or []
            if d.get("DeploymentSetId") == ds_id
        ]
        if not found:
            return None
        item = found[0]
        return {
            **prior,
            "id": ds_id,
            "strategy": item.get("DeploymentStrategy") or item.get("Strategy"),
            "deployment_set_name": item.get("DeploymentSetName")
            or prior.get("deployment_set_name"),
            "description": item.get("DeploymentSetDescription") or prior.get("description"),
        }

    def create(self, ctx, planned):
        def given(name: str) -> Any:
            value = planned.get(name)
            return value if known(value) else None

        request = {
            "Strategy": given("strategy"),
            "DeploymentSetName": given("deployment_set_name"),
            "Description": given("description"),
            "OnUnableToRedeployFailedInstance": given("on_unable_to_redeploy_failed_instance"),
        }
        try:
            ds_id = self.client.ecs("CreateDeploymentSet", request)["DeploymentSetId"]
            return self._read(ds_id, planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ecs_deployment_set", exc)
            return None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_ecs_deployment_set", exc)
            return current

    def delete(self, ctx, current):
        try:
            self.client.ecs("DeleteDeploymentSet", {"DeploymentSetId": current["id"]})
        except ApiError as exc:
            if exc.code != "InvalidDeploymentSetId.NotFound":
                self.api_error(ctx.diagnostics, "deleting alicloud_ecs_deployment_set", exc)
                return current
        return None
