output "instance_id" {
  description = "ECS instance id."
  value       = module.box.instance_id
}

output "ssh" {
  description = "How to log in."
  value       = "ssh ${module.box.ssh_user}@${module.box.public_ip}"
}
