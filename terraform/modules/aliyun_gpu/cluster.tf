# What a cluster (node_count > 1) adds to one box: its nodes in one zone (the box's one
# vSwitch), in one deployment set with the low-latency strategy, in a security group whose
# members reach each other on every port, each node tagged with its rank and the cluster name
# and reachable on its own public address. Every resource that takes tags carries the box's;
# the deployment set takes none (CreateDeploymentSet has no Tag parameter), so `orch down` and
# `orch sweep` find it by its name, orch-<name> (orchestrator/clouds/aliyun/cleanup.py).
#
# eRDMA: not used. Elastic RDMA interfaces (ERI) bind only to the instance families that
# support them, per type DescribeInstanceTypes' EriQuantity (0: none) ("ERIs",
# https://www.alibabacloud.com/help/doc-detail/2856980.html). No page read on 2026-12-05 lists
# eRDMA for orch's families (gn6i, gn6v, gn6e, gn7, gn7i, gn7e); support was not confirmed, so
# none is claimed: the nodes talk TCP over the VPC, as orchestrator/catalog/data/network.toml
# plans them (fabric "tcp").

locals {
  cluster = var.node_count > 1
}

# "LowLatency: all instances of the set are deployed in one network topology of the zone, to
# reduce the network latency between them", all in one zone, at most 20 there ("Deployment
# sets", https://www.alibabacloud.com/help/zh/doc-detail/91258.htm; CreateDeploymentSet
# Strategy, https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-createdeploymentset).
# alicloud_ecs_deployment_set (aliyun/terraform-provider-alicloud v1.289.0,
# alicloud/resource_alicloud_ecs_deployment_set.go): strategy O+C+ForceNew, one of
# Availability, AvailabilityGroup, LowLatency; deployment_set_name `^([\w\\:\-]){2,128}$`.
resource "alicloud_ecs_deployment_set" "this" {
  count = local.cluster ? 1 : 0

  deployment_set_name = "orch-${var.name}"
  description         = "orch cluster ${var.name}: ${var.node_count} nodes"
  strategy            = "LowLatency"
}
