"""Preflight: what `orch up` and `orch run` check before any box record, lock or Terraform
run, so that a missing credential costs one line (exit 2) and leaves nothing behind.

The credential check is the cloud's own (`Cloud.credentials()`: its SDK's chain, resolved
without an API call); the region is the plan's, already checked against the cloud's region
rule by plan_validate. A plan's alternatives on another cloud that has no credentials are
dropped (failover there could only fail), with a line saying so.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator import clouds
from orchestrator.clouds.values import Credentials
from orchestrator.errors import UsageError
from orchestrator.plan import Plan


def cloud_credentials(name: str, cache: dict[str, Credentials] | None = None) -> Credentials:
    """The credentials cloud `name` resolves now (cached per call site in `cache`)."""
    cache = {} if cache is None else cache
    if name not in cache:
        cache[name] = clouds.get(name).credentials()
    return cache[name]


def preflight(plan: Plan, say: Callable[[str], None]) -> Plan:
    """`plan`, checked and trimmed; UsageError when its chosen cloud has no credentials."""
    cache: dict[str, Credentials] = {}
    choice = plan.choice
    found = cloud_credentials(choice.cloud, cache)
    if not found.found:
        cloud = clouds.get(choice.cloud)
        raise UsageError(
            f"{found.problem or 'no credentials'} for the box in {cloud.title}"
            f" {choice.region}; nothing was created",
            hint=found.hint or None,
        )
    kept = [c for c in plan.alternatives if cloud_credentials(c.cloud, cache).found]
    dropped = sorted({c.cloud for c in plan.alternatives} - {c.cloud for c in kept})
    if dropped:
        say(f"no credentials for {', '.join(dropped)}: its plan alternatives are not tried")
    plan.alternatives = kept
    return plan
