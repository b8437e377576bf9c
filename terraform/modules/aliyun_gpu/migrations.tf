# node_count made the instance a counted resource: state written by an older orch for one box
# moves to node 0 instead of the box being destroyed and recreated.
moved {
  from = alicloud_instance.this
  to   = alicloud_instance.this[0]
}
