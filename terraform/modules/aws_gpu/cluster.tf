# What a cluster (node_count > 1) adds to one box: its nodes in one zone and one `cluster`
# placement group, a security group open to itself (main.tf), every EFA interface the type
# has, and an Elastic IP for rank 0 when several network cards forbid a public address.
# Every resource carries the box's tags, so `orch down` and `orch sweep` find each of them.

locals {
  cluster = var.node_count > 1
  efa     = local.cluster && var.efa_interfaces > 0
  # EC2 assigns a public IPv4 address at launch only to an instance with one network
  # interface ("You can't auto-assign a public IPv4 address if you specify more than one
  # network interface", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html):
  # with several EFA cards rank 0 gets an Elastic IP and the other nodes only private
  # addresses (orch reaches them through rank 0).
  rank0_eip = local.efa && var.efa_interfaces > 1

  # A cluster lives in one subnet: the given one, else the default subnet of zone_id.
  subnet_id = (
    var.subnet_id != null ? var.subnet_id :
    local.cluster ? one(data.aws_subnet.zone[*].id) : null
  )
}

data "aws_subnet" "zone" {
  count             = local.cluster && var.subnet_id == null ? 1 : 0
  vpc_id            = local.vpc_id
  availability_zone = var.zone_id
  default_for_az    = true
}

# Nodes packed close together in one zone for the lowest latency and highest per-flow
# throughput between them ("Placement strategies: Cluster",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html#placement-groups-cluster).
resource "aws_placement_group" "this" {
  count    = local.cluster ? 1 : 0
  name     = "orch-${var.name}"
  strategy = "cluster"
  tags     = local.tags
}

# Every EFA interface the type supports, one per network card, as EC2's "Maximize network
# bandwidth on Amazon EC2 instances with multiple network cards" asks
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html, the P5 runbook
# at .../p5-efa.html): the primary interface on network card 0 with device index 0, each other
# one on the next network card (1 .. N-1) with device index 1; InterfaceType "efa" (EFA with
# ENA) on all of them. Interfaces that need these indexes can only be described at launch, in
# RunInstances or a launch template: aws_instance's own network_interface block only attaches
# existing ones. The provider's aws_launch_template network_interfaces block takes
# interface_type ("To create an Elastic Fabric Adapter (EFA), specify efa"), network_card_index
# and device_index (hashicorp/terraform-provider-aws v5.100.0,
# website/docs/r/launch_template.html.markdown and internal/service/ec2/ec2_launch_template.go).
# The security group goes on each interface: a launch template with network interfaces cannot
# also set security groups for the instance (AWS PCS, "Create or update an EC2 launch
# template", https://docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_efa_create-lt.html).
resource "aws_launch_template" "this" {
  count       = local.efa ? 1 : 0
  name_prefix = "orch-${var.name}-"
  description = "orch cluster ${var.name}: ${var.efa_interfaces} EFA interfaces per node"
  tags        = local.tags

  dynamic "network_interfaces" {
    for_each = range(var.efa_interfaces)
    content {
      network_card_index    = network_interfaces.value
      device_index          = network_interfaces.value == 0 ? 0 : 1
      interface_type        = "efa"
      subnet_id             = local.subnet_id
      security_groups       = [aws_security_group.this.id]
      delete_on_termination = true
    }
  }
}

# Rank 0's public address when the nodes have several network cards. The address is
# associated with rank 0's primary interface: with several interfaces EC2 needs the interface,
# not the instance (AssociateAddress, "If the instance has more than one network interface,
# you must specify a network interface ID",
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AssociateAddress.html).
resource "aws_eip" "this" {
  count             = local.rank0_eip ? 1 : 0
  domain            = "vpc"
  network_interface = aws_instance.this[0].primary_network_interface_id
  tags              = local.tags
}
