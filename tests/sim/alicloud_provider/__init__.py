"""A test stand-in for the aliyun/alicloud Terraform provider, built on the `tf` package.

It implements exactly what terraform/modules/aliyun_gpu uses (alicloud_vpc, alicloud_vswitch,
alicloud_security_group, alicloud_security_group_rule, alicloud_ecs_key_pair, alicloud_instance
and data "alicloud_images"), with schemas that are a faithful subset of the real provider at
VERSION (names, types, required/optional/computed, ForceNew; each resource cites its source
file), and drives the ECS/VPC emulator (tests/sim/aliyun) through the real Alibaba Cloud SDK.

Real Terraform core runs it from a filesystem mirror written by tests.sim.mirror.
"""

from __future__ import annotations

# The aliyun/alicloud release whose schemas this provider follows; terraform/modules/aliyun_gpu
# pins the same version, so `terraform init` picks this provider from the test mirror.
VERSION = "1.289.0"
SOURCE_TAG = "https://github.com/aliyun/terraform-provider-alicloud/tree/v1.289.0/alicloud"
