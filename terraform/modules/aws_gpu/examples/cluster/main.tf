# Two p4d.24xlarge (8x A100 each) in one zone and one cluster placement group, each with its
# four EFA interfaces, a security group open to itself, and an Elastic IP on rank 0 (the only
# node reachable from outside; the other reaches the internet through the VPC as usual).

provider "aws" {
  region = var.region
}

module "box" {
  source = "../.."

  name              = "example-cluster"
  owner             = "me@laptop"
  instance_type     = "p4d.24xlarge"
  image_source      = "ssm_parameter"
  root_volume_size  = 300
  ssh_public_key    = var.ssh_public_key
  ssh_ingress_cidrs = [var.ssh_cidr]
  expires_at        = "2026-12-02T21:00:00Z"

  node_count     = 2
  efa_interfaces = 4 # p4d.24xlarge: one per network card
  zone_id        = "${var.region}a"
}
