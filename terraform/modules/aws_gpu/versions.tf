terraform {
  # Cross-variable validation (ssh_ingress_cidrs vs allow_world_ssh, spot_price vs
  # create_spot_instance, image_* vs image_source) needs Terraform 1.9+.
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0, < 6.0"
    }
  }
}
