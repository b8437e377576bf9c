"""AWS: what EC2 says of one instance now, for `orch run`'s watch (DescribeInstances).

EC2 lists a terminated instance for about an hour, then answers InvalidInstanceID.NotFound:
both mean the box is gone, as "terminated" and "missing".
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.values import InstanceState

# EC2 instance state names (InstanceState.Name) -> orch's normalised states.
STATES = {
    "pending": "pending",
    "running": "running",
    "stopping": "stopping",
    "stopped": "stopped",
    "shutting-down": "terminated",  # on its way out: it never comes back from here
    "terminated": "terminated",
}
# StateReason codes the spot service sets when it takes an instance back: terminated, or
# stopped (persistent requests with interruption behaviour "stop"); EC2 API reference,
# StateReason: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StateReason.html
SPOT_RECLAIM_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
NOT_FOUND = "InvalidInstanceID.NotFound"


def state_of(item: dict[str, Any]) -> InstanceState:
    """One DescribeInstances `Instances[]` entry -> InstanceState."""
    name = item.get("State", {}).get("Name", "")
    if name not in STATES:
        raise AwsError(f"AWS DescribeInstances: unknown instance state {name!r}")
    reason = (item.get("StateReason") or {}).get("Code", "")
    # The code alone decides: EC2 sets these codes on spot instances only (InstanceLifecycle
    # "spot"), and a spot instance the user stopped or terminated carries a Client.* code, so
    # InstanceLifecycle adds nothing, and requiring it would only risk missing a reclaim.
    return InstanceState(STATES[name], reason, reason in SPOT_RECLAIM_CODES)


def instance_state(region: str, instance_id: str) -> InstanceState:
    """What EC2 says of `instance_id` in `region` now; "missing" when it no longer lists it.

    Raises NoCredentials / AwsError (client.call) for every other failure."""
    ec2 = client("ec2", region)
    try:
        response = call("DescribeInstances", ec2.describe_instances, InstanceIds=[instance_id])
    except AwsError as exc:
        if exc.code == NOT_FOUND:
            return InstanceState("missing")
        raise
    items = [i for r in response.get("Reservations", []) for i in r.get("Instances", [])]
    items = [i for i in items if i.get("InstanceId") == instance_id]
    return state_of(items[0]) if items else InstanceState("missing")
