output "instance_id" {
  description = "EC2 instance id."
  value       = aws_instance.box.id
}

output "public_ip" {
  description = "Public IPv4 address (empty in a subnet without public addresses)."
  value       = aws_instance.box.public_ip
}

output "private_ip" {
  description = "Private IPv4 address."
  value       = aws_instance.box.private_ip
}

output "availability_zone" {
  description = "Availability zone the instance landed in."
  value       = aws_instance.box.availability_zone
}

output "ami_id" {
  description = "AMI the instance booted."
  value       = aws_instance.box.ami
}

output "ssh_user" {
  description = "Login user for SSH."
  value       = var.ssh_user
}

output "security_group_id" {
  description = "Security group guarding the instance."
  value       = aws_security_group.box.id
}

output "key_name" {
  description = "EC2 key pair name."
  value       = aws_key_pair.box.key_name
}
