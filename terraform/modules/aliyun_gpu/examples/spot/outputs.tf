output "instance_id" {
  description = "ECS instance id."
  value       = module.box.instance_id
}

output "spot_strategy" {
  description = "SpotWithPriceLimit, since spot_price is set."
  value       = module.box.spot_strategy
}
