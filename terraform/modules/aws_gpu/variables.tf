variable "name" {
  description = "Box name: prefixes the security group and key pair names and fills the Name and orch:box tags."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,38}$", var.name))
    error_message = "name must start with a lower-case letter and hold at most 39 lower-case letters, digits or dashes."
  }
}

variable "owner" {
  description = "Who created the box (the orch:owner tag), e.g. user@host or a CI job id."
  type        = string
  default     = ""
}

variable "expires_at" {
  description = "ISO 8601 UTC time after which the box may be destroyed (the orch:expires-at tag); empty for none."
  type        = string
  default     = ""

  validation {
    condition     = var.expires_at == "" || can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp such as 2026-12-02T21:00:00Z, or empty."
  }
}

variable "instance_type" {
  description = "EC2 instance type, e.g. g5.xlarge."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like family.size, e.g. g5.xlarge."
  }
}

variable "image_source" {
  description = "How the AMI is chosen: \"id\" (ami_id), \"ssm_parameter\" (a public SSM parameter holding the newest AMI id, e.g. the Deep Learning AMI's) or \"name_filter\" (newest image from ami_owners whose name matches ami_name_filter or ami_name_regex)."
  type        = string
  default     = "ssm_parameter"

  validation {
    condition     = contains(["id", "ssm_parameter", "name_filter"], var.image_source)
    error_message = "image_source must be one of id, ssm_parameter, name_filter."
  }
}

variable "ami_id" {
  description = "AMI id used when image_source = \"id\"."
  type        = string
  default     = null

  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must look like ami-0123456789abcdef0."
  }
}

variable "ami_ssm_parameter" {
  description = "Public SSM parameter whose value is an AMI id, used when image_source = \"ssm_parameter\"."
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"
}

variable "ami_name_filter" {
  description = "Glob on the image name (EC2 'name' filter), used when image_source = \"name_filter\"."
  type        = string
  default     = null
}

variable "ami_name_regex" {
  description = "Regular expression on the image name, applied after ami_name_filter when image_source = \"name_filter\"."
  type        = string
  default     = null
}

variable "ami_owners" {
  description = "Image owners (account ids or aliases such as amazon) searched when image_source = \"name_filter\"."
  type        = list(string)
  default     = ["amazon"]
}

variable "root_volume_gib" {
  description = "Root volume size in GiB (gp3, always encrypted)."
  type        = number
  default     = 150

  validation {
    condition     = var.root_volume_gib >= 8 && var.root_volume_gib <= 16384 && floor(var.root_volume_gib) == var.root_volume_gib
    error_message = "root_volume_gib must be a whole number between 8 and 16384."
  }
}

variable "market" {
  description = "\"on-demand\" or \"spot\" (one-time spot request, terminated on interruption)."
  type        = string
  default     = "on-demand"

  validation {
    condition     = contains(["on-demand", "spot"], var.market)
    error_message = "market must be on-demand or spot."
  }
}

variable "spot_max_price" {
  description = "Highest spot price in USD per hour; null means up to the on-demand price."
  type        = string
  default     = null

  validation {
    condition     = var.spot_max_price == null || can(regex("^[0-9]+(\\.[0-9]+)?$", var.spot_max_price))
    error_message = "spot_max_price must be a decimal number such as 1.25."
  }
}

variable "user_data" {
  description = "cloud-init user data run at first boot (plain text; the provider encodes it)."
  type        = string
  default     = ""
}

variable "ssh_public_key" {
  description = "OpenSSH public key installed for ssh_user (orch generates an ed25519 key per box)."
  type        = string

  validation {
    condition     = can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp[0-9]+) [A-Za-z0-9+/=]+", var.ssh_public_key))
    error_message = "ssh_public_key must be an OpenSSH public key line."
  }
}

variable "ssh_user" {
  description = "Login user of the image; passed through to the ssh_user output."
  type        = string
  default     = "ubuntu"
}

variable "ssh_ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach port 22. The world (0.0.0.0/0) needs allow_world_ssh = true."
  type        = list(string)

  validation {
    condition     = length(var.ssh_ingress_cidrs) > 0 && alltrue([for c in var.ssh_ingress_cidrs : can(cidrhost(c, 0)) && !strcontains(c, ":")])
    error_message = "ssh_ingress_cidrs must hold at least one IPv4 CIDR block such as 203.0.113.7/32."
  }

  validation {
    condition     = var.allow_world_ssh || !anytrue([for c in var.ssh_ingress_cidrs : can(cidrhost(c, 0)) && endswith(c, "/0")])
    error_message = "ssh_ingress_cidrs opens SSH to the whole internet; set allow_world_ssh = true to allow it."
  }
}

variable "allow_world_ssh" {
  description = "Allow a /0 block in ssh_ingress_cidrs."
  type        = bool
  default     = false
}

variable "subnet_id" {
  description = "Subnet to launch in; null means a default subnet of the default VPC."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags for the instance, its root volume, the security group and the key pair."
  type        = map(string)
  default     = {}
}
