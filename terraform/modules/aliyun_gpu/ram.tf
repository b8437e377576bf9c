# The box's identity. Either an existing instance RAM role (ram_role_name), or, with
# create_ram_role, a role for this box alone that only the ECS service may assume, allowed only
# the checkpoint prefixes in ram_role_oss_prefixes ("bucket/prefix": objects under the prefix,
# listing the bucket under it). The instance's metadata then serves the role's STS credentials
# at ram/security-credentials/<role> (https://www.alibabacloud.com/help/en/ecs/user-guide/attach-an-instance-ram-role-to-an-ecs-instance).
# Role and policy carry the box's tags plus orch:region (RAM is global; each region's sweep
# claims its own) and go with the box on destroy. Names follow aws_gpu's iam.tf
# (create_ram_role / ram_role_name like create_iam_instance_profile / iam_instance_profile).

locals {
  create_ram = var.create_ram_role
  # RAM role names: 1-64 letters, digits, "." and "-"; policy names: letters, digits and "-".
  # The key's hash keeps two boxes of the same name (other users, other machines) apart, as
  # for the key pair.
  ram_name = "orch-${var.name}-${substr(sha256(local.public_key), 0, 8)}"
  ram_role = local.create_ram ? one(alicloud_ram_role.this[*].role_name) : var.ram_role_name
  ram_tags = merge(local.tags, var.region == null ? {} : { "orch:region" = var.region })

  # "bucket/prefix" -> the bucket and the prefix without surrounding slashes.
  oss_targets = [for entry in var.ram_role_oss_prefixes : {
    bucket = split("/", entry)[0]
    prefix = trim(trimprefix(entry, split("/", entry)[0]), "/")
  }]
}

resource "alicloud_ram_role" "this" {
  count = local.create_ram ? 1 : 0

  role_name   = local.ram_name
  description = "orch box ${var.name}: its checkpoints only"
  tags        = local.ram_tags
  force       = true

  # Only ECS may assume it, for the instance it is attached to.
  assume_role_policy_document = jsonencode({
    Version = "1"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = ["ecs.aliyuncs.com"] }
    }]
  })
}

# Object rights under the checkpoint prefixes, and listing only under them (OSS actions,
# resources acs:oss:*:*:bucket[/object] and the oss:Prefix condition key:
# https://www.alibabacloud.com/help/en/oss/user-guide/ram-policy-overview and
# https://www.alibabacloud.com/help/en/oss/user-guide/common-examples-of-ram-policies).
resource "alicloud_ram_policy" "this" {
  count = local.create_ram && length(var.ram_role_oss_prefixes) > 0 ? 1 : 0

  policy_name = local.ram_name
  description = "orch box ${var.name}: read and write its checkpoint prefixes"
  tags        = local.ram_tags
  force       = true
  policy_document = jsonencode({
    Version = "1"
    Statement = concat(
      [{
        Effect   = "Allow"
        Action   = ["oss:GetObject", "oss:PutObject", "oss:DeleteObject", "oss:AbortMultipartUpload", "oss:ListParts"]
        Resource = [for t in local.oss_targets : "acs:oss:*:*:${t.bucket}/${t.prefix == "" ? "" : "${t.prefix}/"}*"]
      }],
      [for t in local.oss_targets : {
        Effect    = "Allow"
        Action    = ["oss:ListObjects"]
        Resource  = ["acs:oss:*:*:${t.bucket}"]
        Condition = { StringLike = { "oss:Prefix" = ["${t.prefix}/*"] } }
      } if t.prefix != ""],
      [for t in local.oss_targets : {
        Effect   = "Allow"
        Action   = ["oss:ListObjects"]
        Resource = ["acs:oss:*:*:${t.bucket}"]
      } if t.prefix == ""],
    )
  })
}

resource "alicloud_ram_role_policy_attachment" "this" {
  count = local.create_ram && length(var.ram_role_oss_prefixes) > 0 ? 1 : 0

  role_name   = alicloud_ram_role.this[0].role_name
  policy_name = alicloud_ram_policy.this[0].policy_name
  policy_type = "Custom"
}

# The role goes on the instance right after it is created (alicloud_instance.role_name is
# deprecated since provider 1.275.0 for this resource). The attachment waits for the policy, so
# the box never holds a role without its rights.
resource "alicloud_ecs_ram_role_attachment" "this" {
  count = local.ram_role != null ? var.node_count : 0 # every node of a cluster

  instance_id   = alicloud_instance.this[count.index].id
  ram_role_name = local.ram_role

  depends_on = [alicloud_ram_role_policy_attachment.this]
}
