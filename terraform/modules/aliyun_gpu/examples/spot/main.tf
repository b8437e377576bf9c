# A spot ecs.gn6i-c4g1.xlarge (1x T4) paying at most 0.50 an hour (SpotWithPriceLimit), in the
# first zone of the region that has stock for it.

provider "alicloud" {
  region = var.region
}

module "box" {
  source = "../.."

  name          = "example-spot"
  instance_type = "ecs.gn6i-c4g1.xlarge"

  create_spot_instance = true
  spot_price           = 0.50

  root_volume_type  = "cloud_essd"
  root_volume_size  = 100
  ssh_public_key    = var.ssh_public_key
  ssh_ingress_cidrs = [var.ssh_cidr]
}
