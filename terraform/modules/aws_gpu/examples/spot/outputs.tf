output "instance_id" {
  description = "EC2 instance id."
  value       = module.box.instance_id
}

output "availability_zone" {
  description = "Where the spot capacity was found."
  value       = module.box.availability_zone
}
