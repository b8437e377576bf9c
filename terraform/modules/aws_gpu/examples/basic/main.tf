# An on-demand g5.xlarge (1x A10G) booting the newest Deep Learning AMI (PyTorch) of the region,
# reachable over SSH from one address. `terraform init && terraform apply` in this directory.

provider "aws" {
  region = var.region
}

module "box" {
  source = "../.."

  name              = "example"
  owner             = "me@laptop"
  instance_type     = "g5.xlarge"
  image_source      = "ssm_parameter" # the module's default parameter: DLAMI, PyTorch, Ubuntu
  root_volume_size  = 150
  ssh_public_key    = var.ssh_public_key
  ssh_ingress_cidrs = [var.ssh_cidr]
  expires_at        = "2026-12-02T21:00:00Z"

  tags = {
    team = "ml"
  }
}
