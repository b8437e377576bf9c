# A pay-as-you-go ecs.gn7i-c8g1.2xlarge (1x A10) on the newest Ubuntu 22.04 public image, in a
# VPC of its own, reachable over SSH from one address and released by ECS itself at
# auto_release_time. Credentials: ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET.

provider "alicloud" {
  region = var.region
}

module "box" {
  source = "../.."

  name              = "example"
  owner             = "me@laptop"
  instance_type     = "ecs.gn7i-c8g1.2xlarge"
  root_volume_size  = 150
  ssh_public_key    = var.ssh_public_key
  ssh_ingress_cidrs = [var.ssh_cidr]
  expires_at        = "2026-12-02T21:00:00Z"
  auto_release_time = "2026-12-02T21:00:00Z"

  tags = {
    team = "ml"
  }
}
