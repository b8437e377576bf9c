"""Local stand-ins for clouds: emulators of their HTTP APIs and Terraform test providers.

`python -m tests.sim aliyun --port P` serves the Alibaba Cloud ECS/VPC emulator
(tests/sim/aliyun); tests/sim/alicloud_provider is a Terraform provider, written with the `tf`
package, that drives that emulator through the real alibabacloud-ecs20140526 SDK.
"""
