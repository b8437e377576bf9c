terraform {
  # Cross-variable validation (ssh_ingress_cidrs vs allow_world_ssh, spot_price_limit vs
  # spot_strategy) needs Terraform 1.9+.
  required_version = ">= 1.9"

  required_providers {
    alicloud = {
      source = "aliyun/alicloud"
      # Pinned: attribute names and behaviour below were checked against this release's
      # website/docs and Go schemas (alicloud/resource_alicloud_*.go).
      version = "1.289.0"
    }
  }
}
