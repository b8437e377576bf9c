variable "region" {
  description = "AWS region to launch in."
  type        = string
  default     = "us-east-1"
}

variable "ssh_public_key" {
  description = "OpenSSH public key line (the contents of your .pub file)."
  type        = string
}

variable "ssh_cidr" {
  description = "The one address block allowed to SSH in, e.g. 203.0.113.7/32."
  type        = string
}
