"""Provisioning: render a per-box Terraform root module, run Terraform, keep the box registry."""
