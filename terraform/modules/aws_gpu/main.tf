# One EC2 GPU instance for a training job (or node_count of them, a cluster: cluster.tf): a
# security group that lets SSH in from the given blocks only, a key pair, and an instance with
# IMDSv2, an encrypted root volume and optional one-time spot capacity. Layout and naming follow terraform-aws-modules (one resource of a
# kind is `this`; see terraform-aws-modules/terraform-aws-ec2-instance).

locals {
  orch_tags = {
    "Name"            = var.name
    "orch:box"        = var.name
    "orch:owner"      = var.owner
    "orch:expires-at" = var.expires_at
  }
  tags = merge(var.tags, local.orch_tags)

  image_id = (
    var.image_source == "id" ? var.image_id :
    var.image_source == "ssm_parameter" ? one(data.aws_ssm_parameter.this[*].insecure_value) :
    one(data.aws_ami.this[*].id)
  )

  # The security group must sit in the instance's VPC: the given subnet's, else the default.
  vpc_id = (
    var.subnet_id != null ? one(data.aws_subnet.this[*].vpc_id) :
    one(data.aws_vpc.this[*].id)
  )
}

# --- image -------------------------------------------------------------------------------

data "aws_ssm_parameter" "this" {
  count = var.image_source == "ssm_parameter" ? 1 : 0
  name  = var.image_ssm_parameter
}

data "aws_ami" "this" {
  count       = var.image_source == "name_filter" ? 1 : 0
  most_recent = true
  owners      = var.image_owners
  name_regex  = var.image_name_regex

  dynamic "filter" {
    for_each = var.image_name_filter == null ? [] : [var.image_name_filter]
    content {
      name   = "name"
      values = [filter.value]
    }
  }

  filter {
    name   = "state"
    values = ["available"]
  }
}

# --- network -----------------------------------------------------------------------------

data "aws_vpc" "this" {
  count   = var.subnet_id == null ? 1 : 0
  default = true
}

data "aws_subnet" "this" {
  count = var.subnet_id == null ? 0 : 1
  id    = var.subnet_id
}

resource "aws_security_group" "this" {
  name_prefix = "orch-${var.name}-"
  description = "orch box ${var.name}: SSH from the given CIDR blocks only"
  vpc_id      = local.vpc_id
  tags        = local.tags

  ingress {
    description = "SSH"
    from_port   = 22
    to_port     = 22
    protocol    = "tcp"
    cidr_blocks = var.ssh_ingress_cidrs
  }

  # A cluster's nodes talk to each other on every port (NCCL, the rendezvous, EFA's SRD
  # traffic): EFA needs a group that allows all traffic from and to itself ("Prepare an
  # EFA-enabled security group", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html):
  # this rule in, the self egress rule below out. Inline, like the SSH rule: mixing inline
  # rules with aws_vpc_security_group_ingress_rule on one group makes them fight.
  dynamic "ingress" {
    for_each = local.cluster ? [1] : []
    content {
      description = "All traffic between the nodes of the cluster"
      from_port   = 0
      to_port     = 0
      protocol    = "-1"
      self        = true
    }
  }

  egress {
    description = "All outbound"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }

  # EFA's traffic needs an outbound rule to the group itself: the 0.0.0.0/0 rule above does
  # not cover it. Amazon EKS's default cluster group carries both ("Outbound | All | All |
  # Self (for EFA traffic)", https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html),
  # and AWS PCS's EFA group is authorized egress to itself
  # (https://docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_efa_create-sg.html).
  dynamic "egress" {
    for_each = local.cluster ? [1] : []
    content {
      description = "All traffic between the nodes of the cluster (EFA)"
      from_port   = 0
      to_port     = 0
      protocol    = "-1"
      self        = true
    }
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_key_pair" "this" {
  key_name_prefix = "orch-${var.name}-"
  public_key      = var.ssh_public_key
  tags            = local.tags
}

# --- instance ----------------------------------------------------------------------------

resource "aws_instance" "this" {
  count = var.node_count # rank 0 first; one box has one (cluster.tf: what a cluster adds)

  ami           = local.image_id
  instance_type = var.instance_type
  # With EFA the launch template's network interfaces carry the subnet and the security
  # group: EC2 refuses them on the instance as well (cluster.tf).
  subnet_id              = local.efa ? null : local.subnet_id
  availability_zone      = var.subnet_id == null ? var.zone_id : null # its default subnet
  vpc_security_group_ids = local.efa ? null : [aws_security_group.this.id]
  placement_group        = local.cluster ? aws_placement_group.this[0].name : null
  key_name               = aws_key_pair.this.key_name
  user_data              = var.user_data == "" ? null : var.user_data

  dynamic "launch_template" {
    for_each = local.efa ? [1] : []
    content {
      id      = aws_launch_template.this[0].id
      version = aws_launch_template.this[0].latest_version
    }
  }

  # `shutdown -h` inside the guest (the TTL timer) ends the box instead of parking it.
  instance_initiated_shutdown_behavior = "terminate"

  # Credentials (instance_profile) come from the instance metadata service, with a session
  # token only (IMDSv2). Hop limit 2: a container on the box (the DLAMI runs Docker) is one
  # hop further away; AWS recommends 2 for containers ("Instance metadata options",
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html).
  iam_instance_profile = local.instance_profile

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  root_block_device {
    volume_size           = var.root_volume_size
    volume_type           = var.root_volume_type
    iops                  = var.root_volume_iops
    encrypted             = var.root_volume_encrypted
    delete_on_termination = true
    tags                  = local.tags
  }

  dynamic "instance_market_options" {
    for_each = var.create_spot_instance ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        spot_instance_type             = "one-time"
        instance_interruption_behavior = "terminate"
        # The provider takes the price as a string; null bids up to the on-demand price.
        max_price = var.spot_price == null ? null : tostring(var.spot_price)
      }
    }
  }

  tags = local.cluster ? merge(local.tags, {
    "orch:cluster" = var.name
    "orch:node"    = tostring(count.index)
  }) : local.tags

  lifecycle {
    # A newer image published under the same SSM parameter must not replace a running box.
    ignore_changes = [ami]
  }
}
