# One GPU box on Alibaba Cloud ECS: its own VPC + vSwitch (unless given one), a security group
# that lets SSH in from the given blocks only, a key pair, and a pay-as-you-go (optionally
# spot) instance that ECS releases by itself at auto_release_time; or node_count of them, a
# cluster (cluster.tf). Naming follows
# terraform-aws-modules (one resource of a kind is `this`), and inputs that mean the same as in
# terraform/modules/aws_gpu carry the same names.

locals {
  public_key = trimspace(var.ssh_public_key)
  # Key pair names are unique per region and account: the key's hash keeps two boxes with the
  # same name (different users, different machines) apart.
  key_pair_name = "orch-${var.name}-${substr(sha256(local.public_key), 0, 8)}"

  tags = merge(var.tags, {
    "orch:box"        = var.name
    "orch:owner"      = var.owner
    "orch:expires-at" = var.expires_at
  })

  # create_spot_instance + spot_price (the names aws_gpu uses) -> ECS SpotStrategy: spot at
  # the market price capped at pay-as-you-go (SpotAsPriceGo), or up to spot_price.
  spot_strategy = (
    !var.create_spot_instance ? "NoSpot" :
    var.spot_price == null ? "SpotAsPriceGo" : "SpotWithPriceLimit"
  )

  new_network = var.vswitch_id == null
  zone_id     = var.zone_id != null ? var.zone_id : try(data.alicloud_zones.this[0].ids[0], null)
  image_id    = var.image_id != null ? var.image_id : try(data.alicloud_images.this[0].images[0].id, null)
  vpc_id      = local.new_network ? alicloud_vpc.this[0].id : var.vpc_id
  vswitch_id  = local.new_network ? alicloud_vswitch.this[0].id : var.vswitch_id
}

# Zones that sell this instance type, with this disk category, for this market, right now.
data "alicloud_zones" "this" {
  count = local.new_network && var.zone_id == null ? 1 : 0

  available_instance_type     = var.instance_type
  available_resource_creation = "VSwitch"
  available_disk_category     = var.root_volume_type
  instance_charge_type        = "PostPaid"
  spot_strategy               = local.spot_strategy
}

data "alicloud_images" "this" {
  count = var.image_id == null ? 1 : 0

  name_regex  = var.image_name_regex
  owners      = var.image_owners
  most_recent = true
}

resource "alicloud_vpc" "this" {
  count = local.new_network ? 1 : 0

  vpc_name    = "orch-${var.name}"
  cidr_block  = var.vpc_cidr
  description = "orch box ${var.name}"
  tags        = local.tags
}

resource "alicloud_vswitch" "this" {
  count = local.new_network ? 1 : 0

  vpc_id       = alicloud_vpc.this[0].id
  cidr_block   = var.vswitch_cidr
  zone_id      = local.zone_id
  vswitch_name = "orch-${var.name}"
  description  = "orch box ${var.name}"
  tags         = local.tags

  lifecycle {
    # The error code is the one RunInstances returns for the same condition, so `orch up`
    # fails over to the plan's next candidate either way.
    precondition {
      condition     = local.zone_id != null
      error_message = "OperationDenied.NoStock: no zone sells ${var.instance_type} (${local.spot_strategy}, ${var.root_volume_type} system disk) right now."
    }
  }
}

resource "alicloud_security_group" "this" {
  security_group_name = "orch-${var.name}"
  description         = "SSH to orch box ${var.name}"
  vpc_id              = local.vpc_id
  security_group_type = "normal"
  tags                = local.tags

  # A cluster's nodes talk to each other on every port (NCCL, the rendezvous): "When
  # InnerAccessPolicy is set to Accept for a security group, the instances in the security group
  # can communicate with each other", ahead of any rule (ModifySecurityGroupPolicy,
  # https://www.alibabacloud.com/help/en/ecs/developer-reference/api-modifysecuritygrouppolicy).
  # Basic groups start with Accept; a cluster says so rather than rely on it.
  inner_access_policy = local.cluster ? "Accept" : null
}

# SSH only, only from the given blocks. (Egress: the group's default, allow all.)
resource "alicloud_security_group_rule" "ssh" {
  for_each = toset(var.ssh_ingress_cidrs)

  security_group_id = alicloud_security_group.this.id
  type              = "ingress"
  ip_protocol       = "tcp"
  port_range        = "22/22"
  cidr_ip           = each.value
  nic_type          = "intranet"
  policy            = "accept"
  priority          = 1
  description       = "SSH to orch box ${var.name}"
}

resource "alicloud_ecs_key_pair" "this" {
  key_pair_name = local.key_pair_name
  public_key    = local.public_key
  tags          = local.tags
}

resource "alicloud_instance" "this" {
  count = var.node_count # rank 0 first; one box has one (cluster.tf: what a cluster adds)

  instance_name     = local.cluster ? "orch-${var.name}-${count.index}" : "orch-${var.name}"
  description       = "orch box ${var.name}"
  instance_type     = var.instance_type
  image_id          = local.image_id
  availability_zone = local.new_network ? local.zone_id : null
  vswitch_id        = local.vswitch_id
  security_groups   = [alicloud_security_group.this.id]
  key_name          = alicloud_ecs_key_pair.this.key_pair_name
  deployment_set_id = local.cluster ? alicloud_ecs_deployment_set.this[0].id : null

  system_disk_category  = var.root_volume_type
  system_disk_size      = var.root_volume_size
  system_disk_encrypted = var.root_volume_encrypted

  instance_charge_type = "PostPaid"
  spot_strategy        = local.spot_strategy
  spot_price_limit     = local.spot_strategy == "SpotWithPriceLimit" ? var.spot_price : null

  internet_charge_type       = "PayByTraffic"
  internet_max_bandwidth_out = var.internet_max_bandwidth_out

  # Instance metadata only with a session token (the IMDSv2 equivalent).
  http_tokens   = "required"
  http_endpoint = "enabled"

  user_data         = var.user_data == "" ? null : base64encode(var.user_data)
  auto_release_time = var.auto_release_time
  tags = local.cluster ? merge(local.tags, {
    "orch:cluster" = var.name
    "orch:node"    = tostring(count.index)
  }) : local.tags

  lifecycle {
    precondition {
      condition     = local.image_id != null
      error_message = "no ${var.image_owners} image matches ${var.image_name_regex}; set image_id or another image_name_regex."
    }
  }

  # The SSH rules exist before the box boots, so the first login is not refused.
  depends_on = [alicloud_security_group_rule.ssh]
}
