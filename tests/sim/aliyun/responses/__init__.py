"""RPC action handlers: flat request parameters in, response objects shaped as the API reference.

Parameters arrive flattened the way the SDKs send them (`Tag.1.Key`, `SecurityGroupIds.2`,
`SystemDisk.Category`, `Permissions.1.PortRange`); JSON-array parameters (`InstanceIds`,
`SecurityGroupIds` on DescribeSecurityGroups, `KeyPairNames`, `DiskIds`) are decoded here. Field
names in responses are the ones the alibabacloud-ecs20140526 models map (see
`*_response_body.py` in that package). Every response carries a RequestId.

One module per resource family, as moto lays out a service's responses: `params` (parameter
parsing), `instances`, `security_groups`, `key_pairs`, `catalogue` (regions, images, zones,
stock, prices), `commands` (cloud assistant), `tags`, `vpcs`; this module routes actions.
"""

from __future__ import annotations

from typing import Any

from tests.sim.aliyun.models import AliyunBackend, SimError, new_request_id
from tests.sim.aliyun.responses.catalogue import (
    describe_available_resource,
    describe_images,
    describe_price,
    describe_regions,
    describe_zones,
    image_shape,
)
from tests.sim.aliyun.responses.commands import describe_invocation_results, run_command
from tests.sim.aliyun.responses.deployment_sets import (
    create_deployment_set,
    delete_deployment_set,
    describe_account_attributes,
    describe_deployment_sets,
)
from tests.sim.aliyun.responses.instances import (
    base64_text,
    decimal,
    delete_instance,
    delete_instances,
    describe_disks,
    describe_instances,
    describe_user_data,
    disk_shape,
    enum,
    instance_shape,
    market_of,
    modify_instance_auto_release_time,
    run_instances,
    system_disk_of,
)
from tests.sim.aliyun.responses.key_pairs import (
    delete_key_pairs,
    describe_key_pairs,
    import_key_pair,
)
from tests.sim.aliyun.responses.params import (
    Handler,
    Params,
    ecs_tags,
    flag,
    indexed,
    indexed_objects,
    integer,
    json_list,
    matches_tags,
    paginate,
    region_of,
    tags_of,
    vpc_tags,
)
from tests.sim.aliyun.responses.security_groups import (
    _authorize,
    _revoke,
    create_security_group,
    delete_security_group,
    describe_security_group_attribute,
    describe_security_groups,
    rule_of,
    security_group_shape,
)
from tests.sim.aliyun.responses.tags import list_tag_resources, tag_resources, untag_resources
from tests.sim.aliyun.responses.vpcs import (
    create_vpc,
    create_vswitch,
    delete_vpc,
    delete_vswitch,
    describe_vpc_attribute,
    describe_vpcs,
    describe_vswitch_attributes,
    describe_vswitches,
)

ACTIONS: dict[str, Handler] = {
    # instances
    "RunInstances": run_instances,
    "DescribeInstances": describe_instances,
    "DeleteInstance": delete_instance,
    "DeleteInstances": delete_instances,
    "ModifyInstanceAutoReleaseTime": modify_instance_auto_release_time,
    "DescribeUserData": describe_user_data,
    "DescribeDisks": describe_disks,
    # security groups
    "CreateSecurityGroup": create_security_group,
    "DescribeSecurityGroups": describe_security_groups,
    "DescribeSecurityGroupAttribute": describe_security_group_attribute,
    "AuthorizeSecurityGroup": _authorize("ingress"),
    "AuthorizeSecurityGroupEgress": _authorize("egress"),
    "RevokeSecurityGroup": _revoke("ingress"),
    "RevokeSecurityGroupEgress": _revoke("egress"),
    "DeleteSecurityGroup": delete_security_group,
    # key pairs
    "ImportKeyPair": import_key_pair,
    "DescribeKeyPairs": describe_key_pairs,
    "DeleteKeyPairs": delete_key_pairs,
    # deployment sets, account quotas
    "CreateDeploymentSet": create_deployment_set,
    "DescribeDeploymentSets": describe_deployment_sets,
    "DeleteDeploymentSet": delete_deployment_set,
    "DescribeAccountAttributes": describe_account_attributes,
    # catalogue, stock, prices
    "DescribeRegions": describe_regions,
    "DescribeImages": describe_images,
    "DescribeZones": describe_zones,
    "DescribeAvailableResource": describe_available_resource,
    "DescribePrice": describe_price,
    # cloud assistant
    "RunCommand": run_command,
    "DescribeInvocationResults": describe_invocation_results,
    # tags
    "TagResources": tag_resources,
    "UntagResources": untag_resources,
    "ListTagResources": list_tag_resources,
    # VPC API actions (same names in ECS 2014-05-26 and VPC 2016-04-28)
    "CreateVpc": create_vpc,
    "DescribeVpcs": describe_vpcs,
    "DescribeVpcAttribute": describe_vpc_attribute,
    "DeleteVpc": delete_vpc,
    "CreateVSwitch": create_vswitch,
    "DescribeVSwitches": describe_vswitches,
    "DescribeVSwitchAttributes": describe_vswitch_attributes,
    "DeleteVSwitch": delete_vswitch,
}


def dispatch(
    backend: AliyunBackend, action: str, params: Params, actions: dict[str, Handler] | None = None
) -> dict[str, Any]:
    """Run one action of `actions` (default: ECS and VPC); the caller turns SimError into an
    error response."""
    handler = (ACTIONS if actions is None else actions).get(action)
    if handler is None:
        raise SimError(
            "InvalidAction.NotFound",
            f"Specified api is not found, please check your url and method. ({action})",
            404,
        )
    with backend.lock:
        backend.request_log.append(action)
    try:
        if action != "RunInstances":  # RunInstances checks its faults once its zone is known
            backend.raise_fault(action)
        body = handler(backend, params)
    finally:
        backend.notify()  # wake tests waiting on the state (AliyunBackend.wait_for)
    return {"RequestId": new_request_id(), **body}


__all__ = [
    "ACTIONS",
    "Handler",
    "Params",
    "base64_text",
    "create_security_group",
    "create_vpc",
    "create_vswitch",
    "decimal",
    "delete_instance",
    "delete_instances",
    "delete_key_pairs",
    "delete_security_group",
    "delete_vpc",
    "delete_vswitch",
    "describe_available_resource",
    "describe_disks",
    "describe_images",
    "describe_instances",
    "describe_invocation_results",
    "describe_key_pairs",
    "describe_price",
    "describe_regions",
    "describe_security_group_attribute",
    "describe_security_groups",
    "describe_user_data",
    "describe_vpc_attribute",
    "describe_vpcs",
    "describe_vswitch_attributes",
    "describe_vswitches",
    "describe_zones",
    "disk_shape",
    "dispatch",
    "ecs_tags",
    "enum",
    "flag",
    "image_shape",
    "import_key_pair",
    "indexed",
    "indexed_objects",
    "instance_shape",
    "integer",
    "json_list",
    "list_tag_resources",
    "market_of",
    "matches_tags",
    "modify_instance_auto_release_time",
    "paginate",
    "region_of",
    "rule_of",
    "run_command",
    "run_instances",
    "security_group_shape",
    "system_disk_of",
    "tag_resources",
    "tags_of",
    "untag_resources",
    "vpc_tags",
]
