"""A stand-in for EC2 placement groups, answered in front of moto (which has none: moto 5.2
serves no CreatePlacementGroup, DescribePlacementGroups or DeletePlacementGroup).

The EC2 Query API as the real one answers it (the XML shapes and error codes of the API
reference; hashicorp/terraform-provider-aws v5.100.0 internal/service/ec2/ec2_placement_group.go
and find.go call exactly these):
- CreatePlacementGroup {GroupName, Strategy cluster|spread|partition, TagSpecification.N}
  -> {return, placementGroup}; a name in use: InvalidPlacementGroup.Duplicate; an unknown
  strategy: InvalidParameterValue
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html).
- DescribePlacementGroups {GroupName.N, GroupId.N, Filter.N (group-name, strategy, state,
  tag:KEY, tag-key)} -> {placementGroupSet}; a GroupName that does not exist:
  InvalidPlacementGroup.Unknown
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribePlacementGroups.html).
- DeletePlacementGroup {GroupName} -> {return}; unknown: InvalidPlacementGroup.Unknown; a group
  with instances launched into it and not terminated (as far as this stand-in saw):
  InvalidPlacementGroup.InUse
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeletePlacementGroup.html).
- RunInstances naming Placement.GroupName of a group that does not exist is refused with
  InvalidPlacementGroup.Unknown, as EC2 does; otherwise it goes on to moto, and the group
  counts the launch until TerminateInstances names the instance.
- DescribeInstances: an instance launched into a group has the group's name in its
  Placement.GroupName, as EC2 answers (Placement: "GroupName: The name of the placement group
  that the instance is in", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Placement.html);
  moto leaves it empty, and the provider reads it back into aws_instance.placement_group
  (internal/service/ec2/ec2_instance.go), so an empty one would make every plan replace the
  nodes.
"""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any
from xml.sax.saxutils import escape

NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
STRATEGIES = ("cluster", "spread", "partition")
ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>{request}</RequestID></Response>"
)


def _error(code: str, message: str) -> tuple[int, bytes]:
    return 400, ERROR.format(code=code, message=escape(message), request=uuid.uuid4()).encode()


def _ok(action: str, body: str) -> tuple[int, bytes]:
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NAMESPACE}">'
        f"<requestId>{uuid.uuid4()}</requestId>{body}</{action}Response>"
    )
    return 200, text.encode()


def _numbered(form: dict[str, list[str]], prefix: str) -> list[str]:
    """Values of Prefix.1, Prefix.2, ... in order."""
    keys = sorted(
        (int(m.group(1)), k) for k in form if (m := re.fullmatch(re.escape(prefix) + r"\.(\d+)", k))
    )
    return [form[k][0] for _, k in keys]


class PlacementGroups:
    """The placement groups of one account and region (the tests use one of each)."""

    def __init__(self, region: str = "us-east-1", account: str = "123456789012"):
        self.region, self.account = region, account
        self.groups: dict[str, dict[str, Any]] = {}  # name -> group
        self.members: dict[str, set[str]] = {}  # name -> instance ids launched into it
        self.launches: list[str] = []  # GroupName of every RunInstances that named one
        self.launched_into: dict[str, set[str]] = {}  # name -> every instance launched into it
        self._lock = threading.Lock()

    # -- the three placement-group calls ----------------------------------------------------

    def answer(self, form: dict[str, list[str]]) -> tuple[int, bytes] | None:
        """The reply to a placement-group call, None for any other action."""
        action = (form.get("Action") or [""])[0]
        handler = {
            "CreatePlacementGroup": self._create,
            "DescribePlacementGroups": self._describe,
            "DeletePlacementGroup": self._delete,
        }.get(action)
        if handler is None:
            return None
        with self._lock:
            return handler(form)

    def _create(self, form: dict[str, list[str]]) -> tuple[int, bytes]:
        name = (form.get("GroupName") or [""])[0]
        strategy = (form.get("Strategy") or [""])[0]
        if not name or len(name) > 255:
            return _error("InvalidParameterValue", "Invalid value for GroupName")
        if strategy not in STRATEGIES:
            return _error("InvalidParameterValue", f"Invalid value '{strategy}' for strategy")
        if name in self.groups:
            return _error("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' "
                          "already exists.")  # fmt: skip
        tags: dict[str, str] = {}
        for index in range(1, 10):
            kind = (form.get(f"TagSpecification.{index}.ResourceType") or [""])[0]
            if not kind:
                break
            if kind != "placement-group":
                return _error("InvalidParameterValue", f"'{kind}' is not a valid taggable "
                              "resource type for this operation.")  # fmt: skip
            keys = _numbered_tags(form, f"TagSpecification.{index}.Tag")
            tags.update(keys)
        group_id = f"pg-{uuid.uuid4().hex[:17]}"
        self.groups[name] = {
            "name": name,
            "id": group_id,
            "strategy": strategy,
            "state": "available",
            "tags": tags,
        }
        self.members[name] = set()
        return _ok(
            "CreatePlacementGroup",
            f"<return>true</return>{self._xml(self.groups[name], 'placementGroup')}",
        )

    def _describe(self, form: dict[str, list[str]]) -> tuple[int, bytes]:
        names, ids = _numbered(form, "GroupName"), _numbered(form, "GroupId")
        for name in names:
            if name not in self.groups:
                return _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' "
                              "is unknown.")  # fmt: skip
        found = [
            g
            for g in self.groups.values()
            if (not names or g["name"] in names) and (not ids or g["id"] in ids)
        ]
        for index in range(1, 20):
            key = (form.get(f"Filter.{index}.Name") or [""])[0]
            if not key:
                break
            values = _numbered(form, f"Filter.{index}.Value")
            found = [g for g in found if _matches(g, key, values)]
        items = "".join(self._xml(g, "item") for g in found)
        return _ok("DescribePlacementGroups", f"<placementGroupSet>{items}</placementGroupSet>")

    def _delete(self, form: dict[str, list[str]]) -> tuple[int, bytes]:
        name = (form.get("GroupName") or [""])[0]
        if name not in self.groups:
            return _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is "
                          "unknown.")  # fmt: skip
        if self.members.get(name):
            return _error("InvalidPlacementGroup.InUse", f"The Placement Group '{name}' is "
                          "in use and may not be deleted.")  # fmt: skip
        del self.groups[name]
        self.members.pop(name, None)
        return _ok("DeletePlacementGroup", "<return>true</return>")

    # -- launches into a group --------------------------------------------------------------

    def refuse_launch(self, form: dict[str, list[str]]) -> tuple[int, bytes] | None:
        """EC2's error for a RunInstances into a group that does not exist, else None."""
        if (form.get("Action") or [""])[0] != "RunInstances":
            return None
        name = (form.get("Placement.GroupName") or [""])[0]
        if not name:
            return None
        with self._lock:
            self.launches.append(name)
            if name not in self.groups:
                return _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' "
                              "is unknown.")  # fmt: skip
        return None

    def record(self, form: dict[str, list[str]], reply: bytes) -> None:
        """After moto answered: a launch into a group joins it; a termination leaves it."""
        action = (form.get("Action") or [""])[0]
        ids = re.findall(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", reply)
        with self._lock:
            if action == "RunInstances":
                name = (form.get("Placement.GroupName") or [""])[0]
                if name in self.members:
                    self.members[name].update(i.decode() for i in ids)
                    self.launched_into.setdefault(name, set()).update(i.decode() for i in ids)
            elif action == "TerminateInstances":
                gone = set(_numbered(form, "InstanceId"))
                for members in self.members.values():
                    members -= gone

    def placed(self, reply: bytes) -> bytes:
        """A DescribeInstances answer with each member's Placement.GroupName filled in."""
        with self._lock:
            group_of = {i: name for name, ids in self.launched_into.items() for i in ids}
        if not group_of:
            return reply
        parts = re.split(rb"(<instanceId>i-[0-9a-f]+</instanceId>)", reply)
        for index in range(1, len(parts) - 1, 2):
            instance = parts[index][len(b"<instanceId>") : -len(b"</instanceId>")].decode()
            name = group_of.get(instance)
            if name is not None:
                named = f"<placement><groupName>{escape(name)}</groupName>".encode()
                parts[index + 1] = parts[index + 1].replace(b"<placement><groupName/>", named, 1)
        return b"".join(parts)

    def _xml(self, group: dict[str, Any], tag: str) -> str:
        tags = "".join(
            f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
            for k, v in group["tags"].items()
        )
        arn = f"arn:aws:ec2:{self.region}:{self.account}:placement-group/{group['name']}"
        return (
            f"<{tag}><groupName>{escape(group['name'])}</groupName><state>{group['state']}"
            f"</state><strategy>{group['strategy']}</strategy><groupId>{group['id']}</groupId>"
            f"<tagSet>{tags}</tagSet><groupArn>{arn}</groupArn></{tag}>"
        )


def _numbered_tags(form: dict[str, list[str]], prefix: str) -> dict[str, str]:
    tags = {}
    for index in range(1, 51):
        key = (form.get(f"{prefix}.{index}.Key") or [None])[0]
        if key is None:
            break
        tags[key] = (form.get(f"{prefix}.{index}.Value") or [""])[0]
    return tags


def _matches(group: dict[str, Any], key: str, values: list[str]) -> bool:
    if key == "group-name":
        return group["name"] in values
    if key == "strategy":
        return group["strategy"] in values
    if key == "state":
        return group["state"] in values
    if key == "tag-key":
        return any(k in values for k in group["tags"])
    if key.startswith("tag:"):
        return group["tags"].get(key[4:]) in values
    return False
