# Resource addresses before the terraform-aws-modules naming (`this`): state written by an
# older orch moves instead of being destroyed and recreated.

moved {
  from = aws_security_group.box
  to   = aws_security_group.this
}

moved {
  from = aws_key_pair.box
  to   = aws_key_pair.this
}

moved {
  from = aws_instance.box
  to   = aws_instance.this
}

# node_count made the instance a counted resource: one box's instance is node 0.
moved {
  from = aws_instance.this
  to   = aws_instance.this[0]
}
