"""One launch request, checked once: `build_request` runs every check on what `orch up`,
`orch run`, `orch pool create` (and a job file) ask for, before any cloud or Terraform call;
`provision.launch.up` trusts the UpRequest it is given.

A pool keeps `request.to_dict()` in its shared record and reads it back with `from_dict`,
which checks it again (whoever can write the record wrote it). A CI runner registration
(`ci_runner.registered`) is added with `dataclasses.replace`: it holds a secret and is never
part of `to_dict`.

New fields go here with a default, a check in `build_request` and a key in `to_dict`
(`nodes`, 1 to 64, is read by the multi-node work).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from orchestrator import clouds
from orchestrator.clouds.identity import BoxIdentity, check_existing
from orchestrator.errors import UsageError
from orchestrator.plan import Plan
from orchestrator.plan_validate import validate_plan
from orchestrator.provision import inputs, state_backend
from orchestrator.provision.boxes import validate_box_name
from orchestrator.provision.render import RenderRequest
from orchestrator.provision.subnet import for_subnet

SCHEMA = "orch.up/v1"
MAX_NODES = 64


class UserDataSection(Protocol):
    """Something that adds a section to a box's user data and a record to its box.json (a CI
    runner registration)."""

    @property
    def record(self) -> dict[str, Any]: ...

    def user_data(self, ssh_user: str) -> str: ...


@dataclass(frozen=True, slots=True)
class UpRequest:
    """Everything `up` needs for one box, checked."""

    name: str
    plan: Plan
    ssh_cidrs: list[str]  # checked blocks; [] until `with_caller_cidr` (this machine's /32)
    ttl: str | None = None  # as given ("2h", "none"): the box record keeps it
    lifetime: timedelta | None = None  # `ttl` parsed; None: no expiry
    expires_at: datetime | None = None  # when the box expires (from `lifetime`, at build time)
    state: state_backend.StateLocation | None = None  # where Terraform state lives, if remote
    allow_world_ssh: bool = False
    tags: dict[str, str] = field(default_factory=dict)  # the user's (--tag), checked
    own_tags: dict[str, str] = field(default_factory=dict)  # the caller's (a pool's orch:pool)
    spot_max_price: float | None = None  # the spot bid, USD/h
    subnet_id: str | None = None
    owner: str | None = None
    # Zones tried last (a spot box was just reclaimed there: `orch run`'s recovery tries the
    # region's other zones first).
    avoid_zones: tuple[str, ...] = ()
    ssh_alias: bool = False  # write `Host orch-NAME` into the user's ssh_config
    identity: BoxIdentity = field(default_factory=BoxIdentity)  # the box's own role
    nodes: int = 1  # boxes of one cluster (provision/cluster.py); 1: a single box
    ci_runner: UserDataSection | None = None  # `up --ci-runner`: ci_runner.registered adds it

    @property
    def state_url(self) -> str | None:
        return self.state.url if self.state else None

    def expires_at_text(self) -> str | None:
        return inputs.iso(self.expires_at) if self.expires_at else None

    def for_box(self, name: str | None = None, now: datetime | None = None) -> UpRequest:
        """The same request for another launch: its expiry counted from `now`, and named
        `name` when given (a pool's next box, a run's replacement)."""
        expires = inputs.expiry(self.lifetime, now) if self.lifetime else None
        return replace(self, name=validate_box_name(name or self.name), expires_at=expires)

    def with_caller_cidr(self) -> UpRequest:
        """Without --ssh-cidr: this machine's public address (a network call: done last)."""
        if self.ssh_cidrs:
            return self
        return replace(self, ssh_cidrs=[inputs.discover_caller_cidr()])

    def to_dict(self) -> dict[str, Any]:
        """JSON for a shared record; no expiry moment (each box counts its own) and no CI
        registration (it holds a secret)."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "plan": self.plan.to_dict(),
            "ssh_cidrs": list(self.ssh_cidrs),
            "ttl": self.ttl,
            "state_url": self.state_url,
            "allow_world_ssh": self.allow_world_ssh,
            "tags": dict(self.tags),
            "spot_bid": self.spot_max_price,
            "subnet_id": self.subnet_id,
            "owner": self.owner,
            "ssh_alias": self.ssh_alias,
            "instance_profile": self.identity.existing,
            "stores": list(self.identity.stores),
            "agent": self.identity.agent,
            "nodes": self.nodes,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], extra_tags: Mapping[str, str] | None = None
    ) -> UpRequest:
        """A request read from a record, checked as `build_request` checks a command line."""
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise UsageError(f"not an orch launch request (schema {SCHEMA})")
        stores = data.get("stores") or []
        if not isinstance(stores, list) or not all(isinstance(s, str) for s in stores):
            raise UsageError("the launch request's stores are damaged")
        identity = BoxIdentity(
            existing=check_existing(data.get("instance_profile")),
            stores=tuple(stores),
            agent=data.get("agent") is True,
        )
        return build_request(
            lambda: Plan.from_dict(data.get("plan")),  # type: ignore[arg-type]
            name=data.get("name"),  # type: ignore[arg-type]
            ttl=data.get("ttl"),
            ssh_cidrs=_strings(data.get("ssh_cidrs"), "ssh_cidrs"),
            allow_world_ssh=data.get("allow_world_ssh") is True,
            state_url=data.get("state_url"),
            tags=data.get("tags") or {},
            spot_bid=data.get("spot_bid"),
            subnet_id=data.get("subnet_id"),
            owner=data.get("owner"),
            ssh_alias=data.get("ssh_alias") is True,
            identity=identity,
            nodes=data.get("nodes", 1),
            extra_tags=extra_tags,
        )


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"the launch request's {what} are damaged")
    return value


def check_nodes(nodes: object) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes {nodes!r}: give a whole number from 1 to {MAX_NODES}")
    return nodes


def build_request(
    plan: Plan | Callable[[], Plan],
    *,
    name: str,
    ttl: str | None,
    ssh_cidrs: Sequence[str] = (),
    allow_world_ssh: bool = False,
    state_url: str | None = None,
    tags: Sequence[str] | Mapping[str, str] = (),
    spot_bid: float | None = None,
    subnet_id: str | None = None,
    owner: str | None = None,
    ssh_alias: bool = False,
    identity: BoxIdentity | None = None,
    nodes: int = 1,
    extra_tags: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> UpRequest:
    """Every check of a launch, in the order the command line reads: the name, lifetime, bid,
    SSH blocks, tags, owner ($ORCH_OWNER), state location; then the plan (a callable is read
    only now: a plan file, or one made from the model options), with a subnet id only the
    candidates in its cloud and region (provision/subnet.py; `say` tells what was dropped),
    and every candidate's module values. `tags` are user tags (KEY=VALUE strings or a
    mapping); `extra_tags` the caller's own (a pool's)."""
    name = validate_box_name(name)
    lifetime = inputs.check_ttl(ttl)  # "" is an error; `--ttl none` is the explicit "no expiry"
    bid = inputs.check_bid(spot_bid)
    cidrs = inputs.normalise_cidrs(list(ssh_cidrs), allow_world_ssh)
    if isinstance(tags, Mapping):
        user_tags = inputs.check_tags(dict(tags))
    else:
        user_tags = inputs.parse_tags(list(tags))
    if owner:  # the orch:owner tag: a record's owner, else $ORCH_OWNER (default_owner checks it)
        inputs.check_owner(owner)
    else:
        inputs.default_owner()
    state = state_backend.parse_state_url(state_url) if state_url else None
    plan = plan() if callable(plan) else plan
    validate_plan(plan, spot_bid=bid)  # every plan value, before any cloud or network call
    plan = for_subnet(plan, subnet_id, say)  # a subnet's one cloud and region
    request = UpRequest(
        name=name,
        plan=plan,
        ssh_cidrs=cidrs,
        ttl=ttl,
        lifetime=lifetime,
        expires_at=inputs.expiry(lifetime) if lifetime else None,
        state=state,
        allow_world_ssh=allow_world_ssh,
        tags=user_tags,
        own_tags=dict(extra_tags or {}),
        spot_max_price=bid,
        subnet_id=subnet_id,
        owner=owner,
        ssh_alias=ssh_alias,
        identity=identity or BoxIdentity(),
        nodes=check_nodes(nodes),
    )
    for candidate in plan.candidates():
        check_values(request, candidate)
    return request


def check_values(request: UpRequest, candidate: Any) -> None:
    """Let the candidate's cloud map it to module values once, before any cloud call, so that
    what it refuses (a spot bid that rounds to 0, ...) is a usage error with no box record."""
    owner = request.owner or inputs.default_owner()  # the orch:owner tag `up` will set
    clouds.get(candidate.cloud).tfvars(render_request(request, candidate, owner=owner))


def render_request(
    request: UpRequest, candidate: Any, *, public_key: str = "", **more: Any
) -> RenderRequest:
    """The renderer's view of `request` for one candidate (`more`: owner, user data, zone,
    backend, as `up` decides them)."""
    values: dict[str, Any] = dict(
        name=request.name,
        owner=request.owner or "orch",
        candidate=candidate,
        ssh_public_key=public_key,
        ssh_ingress_cidrs=list(request.ssh_cidrs),
        expires_at=request.expires_at_text(),
        allow_world_ssh=request.allow_world_ssh,
        tags={**request.tags, **request.own_tags},
        spot_max_price=request.spot_max_price,
        subnet_id=request.subnet_id,
        identity=request.identity,
    )
    values.update(more)
    return RenderRequest(**values)
