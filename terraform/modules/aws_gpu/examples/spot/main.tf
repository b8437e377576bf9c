# A one-time spot g4dn.xlarge (1x T4) bidding at most $0.30/h, on the newest Ubuntu 24.04 image
# from Canonical, in a subnet of your own.

provider "aws" {
  region = var.region
}

module "box" {
  source = "../.."

  name          = "example-spot"
  instance_type = "g4dn.xlarge"

  image_source      = "name_filter"
  image_owners      = ["099720109477"] # Canonical
  image_name_filter = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"

  create_spot_instance = true
  spot_price           = 0.30

  root_volume_size  = 100
  subnet_id         = var.subnet_id
  ssh_public_key    = var.ssh_public_key
  ssh_ingress_cidrs = [var.ssh_cidr]
}
