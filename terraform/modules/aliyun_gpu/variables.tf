# Inputs shared with terraform/modules/aws_gpu carry the same names and meanings there:
# name, owner, expires_at, instance_type, image_id, image_name_regex, image_owners,
# root_volume_size, root_volume_type, root_volume_encrypted, create_spot_instance, spot_price,
# user_data, ssh_public_key, ssh_user, ssh_ingress_cidrs, allow_world_ssh, tags.

variable "name" {
  description = "Box name: goes into resource names (orch-<name>) and the orch:box tag."
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
  description = "ISO 8601 UTC time after which the box may be destroyed (the orch:expires-at tag, read by `orch sweep`); empty for none."
  type        = string
  default     = ""

  validation {
    condition     = var.expires_at == "" || can(regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$", var.expires_at))
    error_message = "expires_at must look like 2026-12-02T21:00:00Z, or be empty."
  }
}

variable "auto_release_time" {
  description = "When ECS itself releases the instance (alicloud_instance.auto_release_time), UTC, yyyy-MM-ddTHH:mm:ssZ; ECS requires 30 minutes to 3 years from now. null: never."
  type        = string
  default     = null

  validation {
    condition     = var.auto_release_time == null || can(regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:00Z$", var.auto_release_time))
    error_message = "auto_release_time must be a UTC time on a whole minute, like 2026-12-02T21:00:00Z."
  }
}

variable "instance_type" {
  description = "ECS instance type, e.g. ecs.gn6i-c4g1.xlarge (1x T4) or ecs.gn7i-c8g1.2xlarge (1x A10)."
  type        = string

  validation {
    condition     = can(regex("^ecs\\.[a-z0-9-]+\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like ecs.<family>.<size>, e.g. ecs.gn6i-c4g1.xlarge."
  }
}

variable "zone_id" {
  description = "Zone to launch in; null picks the first zone (alphabetically) that sells instance_type with root_volume_type for this market (data \"alicloud_zones\"). Ignored when vswitch_id is set."
  type        = string
  default     = null

  validation {
    condition     = var.zone_id == null || can(regex("^[a-z]{2}-[a-z0-9-]+$", var.zone_id))
    error_message = "zone_id must look like cn-hangzhou-h or ap-southeast-1a."
  }
}

variable "image_id" {
  description = "Image id to boot; null means the newest image from image_owners whose name matches image_name_regex."
  type        = string
  default     = null

  validation {
    condition     = var.image_id == null || can(regex("^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", var.image_id))
    error_message = "image_id must be an ECS image id such as m-bp1abc... or ubuntu_22_04_x64_20G_alibase_20241120.vhd."
  }
}

variable "image_name_regex" {
  description = "Regular expression on image names, used when image_id is null (data \"alicloud_images\" name_regex)."
  type        = string
  default     = "^ubuntu_22_04_x64"

  validation {
    condition     = can(regexall(var.image_name_regex, ""))
    error_message = "image_name_regex must be a valid regular expression."
  }
}

variable "image_owners" {
  description = "Whose images image_name_regex searches: system (public images), self, others or marketplace."
  type        = string
  default     = "system"

  validation {
    condition     = contains(["system", "self", "others", "marketplace"], var.image_owners)
    error_message = "image_owners must be one of system, self, others, marketplace."
  }
}

variable "root_volume_size" {
  description = "Root (system) disk size in GiB."
  type        = number
  default     = 100

  validation {
    condition     = var.root_volume_size >= 20 && var.root_volume_size <= 2048 && floor(var.root_volume_size) == var.root_volume_size
    error_message = "root_volume_size must be a whole number of GiB between 20 and 2048."
  }
}

variable "root_volume_type" {
  description = "Root (system) disk category."
  type        = string
  default     = "cloud_essd"

  validation {
    condition     = contains(["cloud_essd", "cloud_ssd", "cloud_efficiency", "cloud_auto", "cloud_essd_entry"], var.root_volume_type)
    error_message = "root_volume_type must be one of cloud_essd, cloud_ssd, cloud_efficiency, cloud_auto, cloud_essd_entry."
  }
}

variable "root_volume_encrypted" {
  description = "Encrypt the root (system) disk (with the account's default KMS key)."
  type        = bool
  default     = true
}

# --- market ------------------------------------------------------------------------------

variable "create_spot_instance" {
  description = "Run as a spot (preemptible) instance instead of pay-as-you-go: SpotAsPriceGo, or SpotWithPriceLimit when spot_price is set."
  type        = bool
  default     = false
}

variable "spot_price" {
  description = "Highest hourly spot price, in the account's currency; null pays the market price, capped at the pay-as-you-go price."
  type        = number
  default     = null

  validation {
    condition     = var.spot_price == null || try(var.spot_price > 0, false)
    error_message = "spot_price must be a positive hourly price, or null."
  }

  validation {
    condition     = var.spot_price == null || var.create_spot_instance
    error_message = "spot_price is a spot bid: it needs create_spot_instance = true."
  }
}

variable "internet_max_bandwidth_out" {
  description = "Outbound public bandwidth in Mbit/s (pay by traffic); 0 means no public IP."
  type        = number
  default     = 10

  validation {
    condition     = var.internet_max_bandwidth_out >= 0 && var.internet_max_bandwidth_out <= 100 && floor(var.internet_max_bandwidth_out) == var.internet_max_bandwidth_out
    error_message = "internet_max_bandwidth_out must be a whole number from 0 to 100."
  }
}

variable "user_data" {
  description = "Script or cloud-config run at first boot, as plain text (the module base64-encodes it; ECS allows 32 KB encoded)."
  type        = string
  default     = ""

  validation {
    condition     = length(base64encode(var.user_data)) <= 32768
    error_message = "user_data must fit in 32 KB once base64-encoded (the ECS limit)."
  }
}

variable "ssh_public_key" {
  description = "OpenSSH public key imported as the box's ECS key pair (orch generates one per box)."
  type        = string

  validation {
    condition     = can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp[0-9]+) [A-Za-z0-9+/=]+", trimspace(var.ssh_public_key)))
    error_message = "ssh_public_key must be an OpenSSH public key line."
  }
}

variable "ssh_user" {
  description = "Login user of the image; passed through to the ssh_user output (root on Alibaba Cloud public images)."
  type        = string
  default     = "root"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name such as root or ecs-user."
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

variable "vpc_cidr" {
  description = "CIDR block of the VPC created for the box (when vswitch_id is null)."
  type        = string
  default     = "172.16.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0))
    error_message = "vpc_cidr must be a CIDR block."
  }
}

variable "vswitch_cidr" {
  description = "CIDR block of the vSwitch created for the box, inside vpc_cidr (when vswitch_id is null)."
  type        = string
  default     = "172.16.0.0/24"

  validation {
    condition     = can(cidrhost(var.vswitch_cidr, 0))
    error_message = "vswitch_cidr must be a CIDR block."
  }
}

variable "vswitch_id" {
  description = "Existing vSwitch to launch in; null creates a VPC and vSwitch for the box. Needs vpc_id."
  type        = string
  default     = null

  validation {
    condition     = (var.vswitch_id == null) == (var.vpc_id == null)
    error_message = "vswitch_id and vpc_id go together: set both (existing network) or neither (a new one)."
  }

  validation {
    condition     = var.vswitch_id == null || can(regex("^vsw-[a-z0-9]+$", var.vswitch_id))
    error_message = "vswitch_id must look like vsw-bp1abc...."
  }
}

variable "vpc_id" {
  description = "VPC of vswitch_id (the security group is created there)."
  type        = string
  default     = null

  validation {
    condition     = var.vpc_id == null || can(regex("^vpc-[a-z0-9]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-bp1abc...."
  }
}

variable "tags" {
  description = "Extra tags for the instance, security group, key pair, VPC and vSwitch (orch:* tags are added)."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([for key, value in var.tags :
      !startswith(key, "aliyun") && !startswith(key, "acs:") && length(key) <= 128 && length(value) <= 128
      && !strcontains(key, "http://") && !strcontains(key, "https://")
    ])
    error_message = "tag keys must not start with aliyun or acs: nor contain http:// or https://; keys and values hold at most 128 characters."
  }
}

variable "region" {
  description = "The provider's region, for the orch:region tag of the box's RAM role and policy (RAM is global); null: no such tag."
  type        = string
  default     = null

  validation {
    condition     = var.region == null || can(regex("^[a-z]{2}-[a-z0-9-]+$", var.region))
    error_message = "region must look like cn-hangzhou."
  }
}

variable "create_ram_role" {
  description = "Create an instance RAM role for this box alone (only ECS may assume it), allowed only ram_role_oss_prefixes, and attach it to the instance."
  type        = bool
  default     = false

  validation {
    condition     = !(var.create_ram_role && var.ram_role_name != null)
    error_message = "create_ram_role and ram_role_name exclude each other: create a role, or attach an existing one."
  }
}

variable "ram_role_name" {
  description = "An existing instance RAM role to attach to the instance (created by you; never changed or deleted here)."
  type        = string
  default     = null

  validation {
    condition     = var.ram_role_name == null || can(regex("^[A-Za-z0-9.-]{1,64}$", var.ram_role_name))
    error_message = "ram_role_name must be 1-64 letters, digits, periods or dashes (RAM's rule for role names)."
  }
}

variable "ram_role_oss_prefixes" {
  description = "\"bucket/prefix\" entries (or a bare bucket) the created role may read, write, delete and list under (checkpoints)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for entry in var.ram_role_oss_prefixes : can(regex("^[a-z0-9][a-z0-9-]{1,61}[a-z0-9](/[^*?\\s]*)?$", entry))])
    error_message = "each entry is an OSS bucket name (3-63 lower-case letters, digits, dashes), optionally followed by /prefix without * or ?."
  }
}

# --- cluster -----------------------------------------------------------------------------

variable "node_count" {
  description = "Instances to create (a multi-node cluster when more than 1): one zone, one deployment set with the LowLatency strategy, a security group whose members reach each other, each instance tagged orch:node (its rank) and orch:cluster. At most 20: a LowLatency set holds 20 instances in its zone."
  type        = number
  default     = 1

  validation {
    # "LowLatency: all instances must be in one zone, at most 20 instances there" (Deployment
    # sets, limits: https://www.alibabacloud.com/help/zh/doc-detail/91258.htm).
    condition     = var.node_count >= 1 && var.node_count <= 20 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 20 (a LowLatency deployment set holds 20 instances)."
  }

  validation {
    # The same page: "spot (preemptible) instances cannot be created in a deployment set".
    condition     = var.node_count == 1 || !var.create_spot_instance
    error_message = "a cluster (node_count > 1) cannot be spot: ECS does not put spot instances in a deployment set."
  }
}
