# instance_id, instance_type, public_ip, private_ip, availability_zone, image_id, ssh_user,
# security_group_id, key_name and vpc_id mean the same in terraform/modules/aws_gpu. orch reads
# A cluster's one-box outputs are rank 0's (node 0), so single-box commands work on its rank 0.
# instance_id, public_ip, private_ip and ssh_user (status, check).

output "instance_id" {
  description = "ECS instance id."
  value       = alicloud_instance.this[0].id
}

output "public_ip" {
  description = "Public IPv4 address (empty when internet_max_bandwidth_out is 0)."
  value       = alicloud_instance.this[0].public_ip
}

output "private_ip" {
  description = "Private IPv4 address in the vSwitch."
  value       = alicloud_instance.this[0].private_ip
}

output "availability_zone" {
  description = "Zone the instance runs in."
  value       = alicloud_instance.this[0].availability_zone
}

output "image_id" {
  description = "Image the instance booted."
  value       = alicloud_instance.this[0].image_id
}

output "instance_type" {
  description = "ECS instance type."
  value       = alicloud_instance.this[0].instance_type
}

output "spot_strategy" {
  description = "ECS spot strategy the instance runs with: NoSpot, SpotAsPriceGo or SpotWithPriceLimit."
  value       = alicloud_instance.this[0].spot_strategy
}

output "auto_release_time" {
  description = "When ECS releases the instance by itself (UTC), or null."
  value       = alicloud_instance.this[0].auto_release_time
}

output "ssh_user" {
  description = "Login user for SSH."
  value       = var.ssh_user
}

output "security_group_id" {
  description = "Security group guarding the instance."
  value       = alicloud_security_group.this.id
}

output "key_name" {
  description = "ECS key pair name."
  value       = alicloud_ecs_key_pair.this.key_pair_name
}

output "vpc_id" {
  description = "VPC of the instance."
  value       = local.vpc_id
}

output "vswitch_id" {
  description = "vSwitch of the instance."
  value       = local.vswitch_id
}

output "ram_role_name" {
  description = "The instance RAM role on the box (created or given), or null."
  value       = local.ram_role
}

output "nodes" {
  description = "A cluster's nodes, rank 0 first: index, instance_id, public_ip, private_ip, availability_zone (the shape aws_gpu's nodes output has; orchestrator/provision/cluster.py reads it); null for one box."
  value = local.cluster ? [for index, node in alicloud_instance.this : {
    index             = index
    instance_id       = node.id
    public_ip         = node.public_ip
    private_ip        = node.private_ip
    availability_zone = node.availability_zone
  }] : null
}

output "deployment_set_id" {
  description = "A cluster's deployment set (LowLatency strategy); null for one box."
  value       = one(alicloud_ecs_deployment_set.this[*].id)
}
