# instance_id, public_ip, private_ip, availability_zone, ssh_user, security_group_id, key_name
# and image_id mean the same in terraform/modules/aliyun_gpu. orch reads instance_id,
# public_ip, private_ip and ssh_user (status, check); ami_id stays for boxes rendered before
# image_id existed.

output "instance_id" {
  description = "EC2 instance id."
  value       = aws_instance.this.id
}

output "instance_type" {
  description = "EC2 instance type."
  value       = aws_instance.this.instance_type
}

output "public_ip" {
  description = "Public IPv4 address (empty in a subnet without public addresses)."
  value       = aws_instance.this.public_ip
}

output "private_ip" {
  description = "Private IPv4 address."
  value       = aws_instance.this.private_ip
}

output "availability_zone" {
  description = "Availability zone the instance runs in."
  value       = aws_instance.this.availability_zone
}

output "image_id" {
  description = "AMI the instance booted."
  value       = aws_instance.this.ami
}

output "ami_id" {
  description = "AMI the instance booted (same as image_id; the name older orch releases read)."
  value       = aws_instance.this.ami
}

output "ssh_user" {
  description = "Login user for SSH."
  value       = var.ssh_user
}

output "security_group_id" {
  description = "Security group guarding the instance."
  value       = aws_security_group.this.id
}

output "key_name" {
  description = "EC2 key pair name."
  value       = aws_key_pair.this.key_name
}

output "vpc_id" {
  description = "VPC of the instance."
  value       = local.vpc_id
}

output "subnet_id" {
  description = "Subnet of the instance."
  value       = aws_instance.this.subnet_id
}
