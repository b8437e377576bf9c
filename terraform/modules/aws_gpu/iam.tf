# The box's identity. Either an existing instance profile (iam_instance_profile), or, with
# create_iam_instance_profile, a role and instance profile for this box alone: allowed only the
# checkpoint prefixes in iam_role_s3_prefixes (objects under them, listing them) and, with
# iam_role_ssm, the AWS managed policy AmazonSSMManagedInstanceCore. They carry the box's tags
# plus orch:region (IAM is global; the sweeper lists it per region) and the path /orch/, and go
# with the box on destroy. Naming follows terraform-aws-modules/ec2-instance
# (create_iam_instance_profile, iam_instance_profile, iam_role_*).

locals {
  create_iam = var.create_iam_instance_profile
  instance_profile = (
    local.create_iam ? one(aws_iam_instance_profile.this[*].name) : var.iam_instance_profile
  )
  iam_tags  = merge(local.tags, { "orch:region" = data.aws_region.this.name })
  partition = data.aws_partition.this.partition

  # "bucket/prefix" -> the objects under the prefix, and the bucket with a prefix condition.
  s3_targets = [for entry in var.iam_role_s3_prefixes : {
    bucket = split("/", entry)[0]
    prefix = trimprefix(trimprefix(entry, split("/", entry)[0]), "/")
  }]
}

data "aws_partition" "this" {}

data "aws_region" "this" {}

resource "aws_iam_role" "this" {
  count = local.create_iam ? 1 : 0

  # Role name prefixes hold at most 38 characters (the provider adds 26).
  name_prefix = "orch-${substr(var.name, 0, 32)}-"
  path        = "/orch/"
  description = "orch box ${var.name}: its checkpoints (and SSM) only"
  tags        = local.iam_tags

  # Only EC2 may assume it, for the instance it is attached to.
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })

  lifecycle {
    # IAM tags allow fewer characters than EC2's, which var.tags is checked against: key
    # [\p{L}\p{Z}\p{N}_.:/=+\-@]+, value the same or empty (IAM API Reference, Tag,
    # https://docs.aws.amazon.com/IAM/latest/APIReference/API_Tag.html). Refused at plan
    # time, before anything is created, rather than by CreateRole halfway through an apply.
    precondition {
      condition = alltrue([for key, value in local.iam_tags :
        can(regex("^[\\p{L}\\p{Z}\\p{N}_.:/=+@-]+$", key)) && can(regex("^[\\p{L}\\p{Z}\\p{N}_.:/=+@-]*$", value))
      ])
      error_message = "with create_iam_instance_profile, tag keys and values (tags, owner) may hold only letters, digits, spaces and _ . : / = + - @ (IAM's tag rule)."
    }
  }
}

# Object and listing rights on the checkpoint prefixes only (S3 actions, resources and the
# s3:prefix condition key: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html).
resource "aws_iam_role_policy" "this" {
  count = local.create_iam && length(var.iam_role_s3_prefixes) > 0 ? 1 : 0

  name = "orch-checkpoints"
  role = aws_iam_role.this[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [{
        Sid      = "CheckpointObjects"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = [for t in local.s3_targets : "arn:${local.partition}:s3:::${t.bucket}/${t.prefix == "" ? "" : "${t.prefix}/"}*"]
      }],
      [for t in local.s3_targets : {
        Effect    = "Allow"
        Action    = ["s3:ListBucket"]
        Resource  = ["arn:${local.partition}:s3:::${t.bucket}"]
        Condition = { StringLike = { "s3:prefix" = ["${t.prefix}/*"] } }
      } if t.prefix != ""],
      [for t in local.s3_targets : {
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = ["arn:${local.partition}:s3:::${t.bucket}"]
      } if t.prefix == ""],
    )
  })
}

resource "aws_iam_role_policy_attachment" "this" {
  count = local.create_iam && var.iam_role_ssm ? 1 : 0

  role       = aws_iam_role.this[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "this" {
  count = local.create_iam ? 1 : 0

  name_prefix = "orch-${substr(var.name, 0, 32)}-"
  path        = "/orch/"
  role        = aws_iam_role.this[0].name
  tags        = local.iam_tags
}
