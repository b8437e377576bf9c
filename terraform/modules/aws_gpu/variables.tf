# Inputs shared with terraform/modules/aliyun_gpu carry the same names and meanings there:
# name, owner, expires_at, instance_type, image_id, image_name_regex, image_owners,
# root_volume_size, root_volume_type, root_volume_encrypted, create_spot_instance, spot_price,
# user_data, ssh_public_key, ssh_user, ssh_ingress_cidrs, allow_world_ssh, tags.

# --- identity and tags -------------------------------------------------------------------

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
  description = "RFC 3339 UTC time after which the box may be destroyed (the orch:expires-at tag, read by `orch sweep`); empty for none."
  type        = string
  default     = ""

  validation {
    condition     = var.expires_at == "" || can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp such as 2026-12-02T21:00:00Z, or empty."
  }
}

variable "tags" {
  description = "Extra tags for the instance, its root volume, the security group and the key pair (the orch:* and Name tags are added)."
  type        = map(string)
  default     = {}

  validation {
    # EC2 tag restrictions: keys up to 128 characters, values up to 256, no aws: prefix.
    condition = alltrue([for key, value in var.tags :
      length(key) > 0 && length(key) <= 128 && length(value) <= 256 && !startswith(lower(key), "aws:")
    ])
    error_message = "tag keys must hold 1 to 128 characters and not start with aws:; values at most 256 characters."
  }
}

# --- instance ----------------------------------------------------------------------------

variable "instance_type" {
  description = "EC2 instance type, e.g. g5.xlarge (1x A10G)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like family.size, e.g. g5.xlarge."
  }
}

variable "user_data" {
  description = "Script or cloud-config run at first boot, as plain text (the provider base64-encodes it; EC2 allows 16 KB)."
  type        = string
  default     = ""

  validation {
    condition     = length(var.user_data) <= 16384
    error_message = "user_data must hold at most 16384 characters (EC2's 16 KB limit before encoding)."
  }
}

# --- image -------------------------------------------------------------------------------

variable "image_source" {
  description = "How the AMI is chosen: \"id\" (image_id), \"ssm_parameter\" (a public SSM parameter holding the newest AMI id, e.g. the Deep Learning AMI's) or \"name_filter\" (newest image from image_owners whose name matches image_name_filter and/or image_name_regex)."
  type        = string
  default     = "ssm_parameter"

  validation {
    condition     = contains(["id", "ssm_parameter", "name_filter"], var.image_source)
    error_message = "image_source must be one of id, ssm_parameter, name_filter."
  }
}

variable "image_id" {
  description = "AMI id to boot when image_source = \"id\"."
  type        = string
  default     = null

  validation {
    condition     = var.image_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.image_id))
    error_message = "image_id must look like ami-0123456789abcdef0."
  }

  validation {
    condition     = var.image_source != "id" || var.image_id != null
    error_message = "image_source = \"id\" needs image_id."
  }
}

variable "image_ssm_parameter" {
  description = "Public SSM parameter whose value is an AMI id, used when image_source = \"ssm_parameter\"."
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"

  validation {
    condition     = var.image_ssm_parameter == null || can(regex("^/[A-Za-z0-9_./-]+$", var.image_ssm_parameter))
    error_message = "image_ssm_parameter must be an SSM parameter path such as /aws/service/.../ami-id."
  }

  validation {
    condition     = var.image_source != "ssm_parameter" || var.image_ssm_parameter != null
    error_message = "image_source = \"ssm_parameter\" needs image_ssm_parameter."
  }
}

variable "image_name_filter" {
  description = "Glob on the image name (EC2 'name' filter), used when image_source = \"name_filter\"."
  type        = string
  default     = null
}

variable "image_name_regex" {
  description = "Regular expression on the image name, applied after image_name_filter when image_source = \"name_filter\"."
  type        = string
  default     = null

  validation {
    condition     = var.image_name_regex == null || can(regexall(var.image_name_regex, ""))
    error_message = "image_name_regex must be a valid regular expression."
  }

  validation {
    condition     = var.image_source != "name_filter" || var.image_name_filter != null || var.image_name_regex != null
    error_message = "image_source = \"name_filter\" needs image_name_filter or image_name_regex."
  }
}

variable "image_owners" {
  description = "Image owners (account ids or aliases such as amazon) searched when image_source = \"name_filter\"."
  type        = list(string)
  default     = ["amazon"]

  validation {
    condition     = length(var.image_owners) > 0
    error_message = "image_owners must name at least one owner."
  }
}

# --- root volume -------------------------------------------------------------------------

variable "root_volume_size" {
  description = "Root volume size in GiB."
  type        = number
  default     = 150

  validation {
    condition     = var.root_volume_size >= 8 && var.root_volume_size <= 16384 && floor(var.root_volume_size) == var.root_volume_size
    error_message = "root_volume_size must be a whole number of GiB between 8 and 16384."
  }
}

variable "root_volume_type" {
  description = "EBS volume type of the root volume."
  type        = string
  default     = "gp3"

  validation {
    condition     = contains(["gp3", "gp2", "io1", "io2"], var.root_volume_type)
    error_message = "root_volume_type must be one of gp3, gp2, io1, io2."
  }
}

variable "root_volume_iops" {
  description = "Provisioned IOPS of the root volume: required for io1 and io2 (EC2 refuses them without), optional for gp3 (3000 without), not settable for gp2."
  type        = number
  default     = null

  validation {
    condition     = var.root_volume_iops == null || try(var.root_volume_iops >= 100 && floor(var.root_volume_iops) == var.root_volume_iops, false)
    error_message = "root_volume_iops must be a whole number of at least 100, or null."
  }

  # EbsBlockDevice.Iops: "This parameter is required for io1 and io2 volumes" and "is not
  # supported for gp2 ... volumes" (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EbsBlockDevice.html).
  validation {
    condition     = !contains(["io1", "io2"], var.root_volume_type) || var.root_volume_iops != null
    error_message = "root_volume_type io1 and io2 need root_volume_iops (EC2 requires Iops for provisioned-IOPS volumes)."
  }

  validation {
    condition     = var.root_volume_type != "gp2" || var.root_volume_iops == null
    error_message = "root_volume_iops cannot be set for gp2 (its IOPS follow its size)."
  }
}

variable "root_volume_encrypted" {
  description = "Encrypt the root volume (with the account's default EBS key)."
  type        = bool
  default     = true
}

# --- market ------------------------------------------------------------------------------

variable "create_spot_instance" {
  description = "Run on spot capacity (a one-time request, terminated on interruption) instead of on-demand."
  type        = bool
  default     = false
}

variable "spot_price" {
  description = "Highest spot price in USD per hour; null bids up to the on-demand price."
  type        = number
  default     = null

  validation {
    condition     = var.spot_price == null || try(var.spot_price > 0, false)
    error_message = "spot_price must be a positive number of USD per hour, or null."
  }

  validation {
    condition     = var.spot_price == null || var.create_spot_instance
    error_message = "spot_price is a spot bid: it needs create_spot_instance = true."
  }
}

# --- access ------------------------------------------------------------------------------

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

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name such as ubuntu or ec2-user."
  }
}

variable "ssh_ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach TCP 22; nothing else is opened. A /0 block needs allow_world_ssh = true."
  type        = list(string)

  validation {
    condition     = length(var.ssh_ingress_cidrs) > 0
    error_message = "ssh_ingress_cidrs must name at least one address block."
  }

  validation {
    condition     = alltrue([for cidr in var.ssh_ingress_cidrs : can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}$", cidr)) && can(cidrhost(cidr, 0))])
    error_message = "every ssh_ingress_cidrs entry must be an IPv4 CIDR block such as 203.0.113.7/32."
  }

  validation {
    condition     = var.allow_world_ssh || alltrue([for cidr in var.ssh_ingress_cidrs : !endswith(cidr, "/0")])
    error_message = "ssh_ingress_cidrs opens SSH to the whole internet; set allow_world_ssh = true to allow it."
  }
}

variable "allow_world_ssh" {
  description = "Allow a /0 block (such as 0.0.0.0/0) in ssh_ingress_cidrs."
  type        = bool
  default     = false
}

# --- network -----------------------------------------------------------------------------

variable "zone_id" {
  description = "Availability zone to launch in (the default VPC's default subnet of that zone); null lets EC2 choose. Ignored when subnet_id is set (the subnet fixes the zone)."
  type        = string
  default     = null

  validation {
    condition     = var.zone_id == null || can(regex("^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$", var.zone_id))
    error_message = "zone_id must look like us-east-1a."
  }
}

variable "subnet_id" {
  description = "Subnet to launch in; null means a default subnet of the default VPC."
  type        = string
  default     = null

  validation {
    condition     = var.subnet_id == null || can(regex("^subnet-[0-9a-f]{8,17}$", var.subnet_id))
    error_message = "subnet_id must look like subnet-0123456789abcdef0."
  }
}

# --- identity ----------------------------------------------------------------------------

variable "iam_instance_profile" {
  description = "Existing IAM instance profile to give the instance (its role is the box's identity); null for none, or with create_iam_instance_profile."
  type        = string
  default     = null

  validation {
    condition     = var.iam_instance_profile == null || can(regex("^[\\w+=,.@-]{1,128}$", var.iam_instance_profile))
    error_message = "iam_instance_profile must be an instance profile name (1-128 letters, digits and + = , . @ _ -)."
  }

  validation {
    condition     = var.iam_instance_profile == null || !var.create_iam_instance_profile
    error_message = "give iam_instance_profile or create_iam_instance_profile = true, not both."
  }
}

variable "create_iam_instance_profile" {
  description = "Create a role and instance profile for this box alone (path /orch/, the box's tags), allowed only iam_role_s3_prefixes and, with iam_role_ssm, Systems Manager."
  type        = bool
  default     = false
}

variable "iam_role_s3_prefixes" {
  description = "\"bucket/prefix\" (or \"bucket\") entries the created role may read, write, list and delete objects under: the box's checkpoint stores."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for entry in var.iam_role_s3_prefixes : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^*?\\s]*)?$", entry))])
    error_message = "every iam_role_s3_prefixes entry must be bucket or bucket/prefix (no wildcards)."
  }
}

variable "iam_role_ssm" {
  description = "Attach AmazonSSMManagedInstanceCore to the created role, so Systems Manager can run commands on the box (orch check --via ssm)."
  type        = bool
  default     = false
}

# --- cluster -----------------------------------------------------------------------------

variable "node_count" {
  description = "Instances to create (a multi-node cluster when more than 1): one zone, a cluster placement group, a security group open to itself, each instance tagged orch:node (its rank) and orch:cluster. Needs zone_id or subnet_id when more than 1."
  type        = number
  default     = 1

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 64 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 64."
  }

  validation {
    condition     = var.node_count == 1 || var.zone_id != null || var.subnet_id != null
    error_message = "a cluster (node_count > 1) needs zone_id or subnet_id: all its nodes go in one zone."
  }
}

variable "efa_interfaces" {
  description = "EFA interfaces per node of a cluster, one per network card (the type's maximum, e.g. 4 for p4d.24xlarge, 32 for p5.48xlarge); 0 for none. Ignored when node_count is 1."
  type        = number
  default     = 0

  validation {
    condition     = var.efa_interfaces >= 0 && var.efa_interfaces <= 32 && floor(var.efa_interfaces) == var.efa_interfaces
    error_message = "efa_interfaces must be a whole number from 0 to 32."
  }
}
