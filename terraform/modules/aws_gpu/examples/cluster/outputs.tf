output "nodes" {
  description = "The cluster's nodes, rank 0 first."
  value       = module.box.nodes
}

output "ssh" {
  description = "Log in to rank 0; the other nodes through it (ssh -J)."
  value       = "ssh ${module.box.ssh_user}@${module.box.public_ip}"
}
