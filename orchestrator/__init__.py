"""orch: size a training job, pick the cheapest GPU box that fits, provision it with Terraform."""

__version__ = "0.1.0"
