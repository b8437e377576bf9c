# A cluster's plain outputs are rank 0's; `nodes` lists every node (null for one box, so a
# box's outputs stay as they were). instance_id, public_ip, private_ip, availability_zone,
# ssh_user, security_group_id, key_name and image_id mean the same in
# terraform/modules/aliyun_gpu. orch reads instance_id, public_ip, private_ip and ssh_user
# (status, check); ami_id stays for boxes rendered before image_id existed.

output "instance_id" {
  description = "EC2 instance id."
  value       = aws_instance.this[0].id
}

output "instance_type" {
  description = "EC2 instance type."
  value       = aws_instance.this[0].instance_type
}

output "public_ip" {
  description = "Public IPv4 address (empty in a subnet without public addresses); a cluster's rank 0's (its Elastic IP with several network cards)."
  value       = local.rank0_eip ? aws_eip.this[0].public_ip : aws_instance.this[0].public_ip
}

output "private_ip" {
  description = "Private IPv4 address."
  value       = aws_instance.this[0].private_ip
}

output "availability_zone" {
  description = "Availability zone the instance runs in."
  value       = aws_instance.this[0].availability_zone
}

output "image_id" {
  description = "AMI the instance booted."
  value       = aws_instance.this[0].ami
}

output "ami_id" {
  description = "AMI the instance booted (same as image_id; the name older orch releases read)."
  value       = aws_instance.this[0].ami
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
  value       = aws_instance.this[0].subnet_id
}

output "nodes" {
  description = "A cluster's nodes, rank 0 first: index, instance_id, public_ip (empty where the node is reached through rank 0), private_ip, availability_zone; null for one box (orchestrator/provision/cluster.py reads it)."
  value = local.cluster ? [for index, node in aws_instance.this : {
    index             = index
    instance_id       = node.id
    public_ip         = index == 0 && local.rank0_eip ? aws_eip.this[0].public_ip : node.public_ip
    private_ip        = node.private_ip
    availability_zone = node.availability_zone
  }] : null
}

output "placement_group" {
  description = "A cluster's placement group name; null for one box."
  value       = one(aws_placement_group.this[*].name)
}
