"""What EC2's instance metadata hands a box as its credentials, worked out from moto.

EC2 serves an instance's role credentials at iam/security-credentials/ROLE when the instance
has an instance profile: temporary credentials of the profile's role, as STS AssumeRole issues
them (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html).
`MotoInstanceIdentity` does the same against moto for the newest running instance of a box:
DescribeInstances (its IamInstanceProfile), GetInstanceProfile (its role), AssumeRole. No
profile on the instance: no credentials (the metadata stand-in answers 404), so a box that
Terraform launched without one cannot reach its checkpoints.

    metadata.aws_identity = MotoInstanceIdentity(endpoint, "us-east-1", "run-spot")

ECS does the same for an instance RAM role at ram/security-credentials/ROLE: STS credentials of
the role, assumed by the ECS service
(https://www.alibabacloud.com/help/en/ecs/user-guide/attach-an-instance-ram-role-to-an-ecs-instance).
`EmulatorInstanceIdentity` asks the Aliyun emulator (tests/sim/aliyun) for the newest running
instance of a box, its RAM role (AttachInstanceRamRole), and the role's AssumeRole answer; no
role, or one ECS may not assume: no credentials.

    metadata.aliyun_identity = EmulatorInstanceIdentity(emulator.backend, "run-spot")
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any


class MotoInstanceIdentity:
    """A callable for MetadataService.aws_identity: (role name, credentials) or None."""

    def __init__(self, endpoint: str, region: str, box: str) -> None:
        import boto3

        def make(service: str) -> Any:
            return boto3.client(
                service,
                endpoint_url=endpoint,
                region_name=region,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )

        self.ec2, self.iam, self.sts = make("ec2"), make("iam"), make("sts")
        self.box = box
        self.issued: list[tuple[str, str]] = []  # (instance id, role name) per AssumeRole
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, dict[str, str]]] = {}

    def instance(self) -> dict[str, Any] | None:
        pages = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:orch:box", "Values": [self.box]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        found = [i for r in pages["Reservations"] for i in r["Instances"]]
        return max(found, key=lambda i: i["LaunchTime"]) if found else None

    def __call__(self) -> tuple[str, dict[str, str]] | None:
        with self._lock:
            instance = self.instance()
            profile = (instance or {}).get("IamInstanceProfile", {}).get("Arn", "")
            if not profile:
                return None
            if instance["InstanceId"] not in self._cache:
                self._cache[instance["InstanceId"]] = self._assume(instance["InstanceId"], profile)
            return self._cache[instance["InstanceId"]]

    def _assume(self, instance_id: str, profile_arn: str) -> tuple[str, dict[str, str]]:
        name = profile_arn.rsplit("/", 1)[1]
        (role,) = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"][
            "Roles"
        ]
        issued = self.sts.assume_role(RoleArn=role["Arn"], RoleSessionName=instance_id)
        credentials = issued["Credentials"]
        self.issued.append((instance_id, role["RoleName"]))
        return role["RoleName"], {
            "Code": "Success",
            "LastUpdated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "Type": "AWS-HMAC",
            "AccessKeyId": credentials["AccessKeyId"],
            "SecretAccessKey": credentials["SecretAccessKey"],
            "Token": credentials["SessionToken"],
            "Expiration": credentials["Expiration"].strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


class EmulatorInstanceIdentity:
    """A callable for MetadataService.aliyun_identity: (role name, credentials) or None."""

    def __init__(self, backend: Any, box: str) -> None:
        self.backend = backend
        self.box = box
        self.issued: list[tuple[str, str]] = []  # (instance id, role name) per AssumeRole
        self._cache: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}

    def instance_id(self) -> str | None:
        with self.backend.lock:
            now = self.backend.now()
            found = [
                i
                for i in self.backend.instances.values()
                if i.tags.get("orch:box") == self.box and i.status(now) == "Running"
            ]
            return max(found, key=lambda i: i.created_at).id if found else None

    def __call__(self) -> tuple[str, dict[str, str]] | None:
        from tests.sim.aliyun.ram_responses import instance_credentials

        instance_id = self.instance_id()
        if instance_id is None:
            return None
        with self.backend.lock:
            role = self.backend.instances[instance_id].ram_role_name
            key = (instance_id, role)
            if key not in self._cache:
                found = instance_credentials(self.backend, instance_id)
                if found is None:
                    return None
                self.issued.append((instance_id, found[0]))
                self._cache[key] = (
                    found[0],
                    {
                        "Code": "Success",
                        "LastUpdated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        **found[1],
                    },
                )
            return self._cache[key]
