"""A pool acts only on its own boxes, never on someone else's lease, and survives a damaged
record (issue 22, items 3 to 5). The record is a local store's; the cloud is the test-only
faux cloud (tests/fixtures/clouds/faux: resource records in a folder), so what a pool box
"carries in the cloud" is real data read through the Cloud seam, not a stub. Destroys are
real too: reconcile runs each in an `orch pool _destroy` child (the faux cloud registered
there through ORCH_CLOUD_PLUGINS), whose `orch down` removes the box's record; these boxes
have no Terraform configuration, so there is nothing else to destroy. A box whose record is
gone was torn down; one whose record is still here was left alone.

- a forged entry naming an ordinary box, or a box whose record or cloud tags name another
  pool or store, is dropped and reported by reconcile and release, and the box is kept;
- `release` without the lease id of a box someone else holds is refused unless --force;
- damaged settings are exit 2 with one line; damaged entries are skipped and reported by
  status, lease and reconcile, and the good entries still work.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator import clouds
from orchestrator.cli import main
from orchestrator.clouds import registry
from orchestrator.clouds.base import BOX_TAG, POOL_STORE_TAG, POOL_TAG
from orchestrator.pool import record as pool_record
from orchestrator.pool.store import open_store
from orchestrator.provision.boxes import Box, box_directory, box_exists
from tests.support import candidate

KEY = pool_record.record_key("gpu")
LEASE_ID = "0123456789abcdef"


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


FAR = iso(datetime.now(UTC) + timedelta(hours=6))
SOON = iso(datetime.now(UTC) + timedelta(minutes=5))


def entry(state: str = "ready", expires: str = FAR, **extra: Any) -> dict[str, Any]:
    return {"state": state, "since": "2026-12-04T10:00:00Z", "by": None, "lease": None,
            "box": {"expires_at": expires, "price_per_hour": 1.0}, **extra}  # fmt: skip


def leased(holder: str = "elsewhere:1:abcdef") -> dict[str, Any]:
    lease = {"id": LEASE_ID, "holder": holder, "taken_at": "2026-12-04T10:00:00Z",
             "expires_at": FAR}  # fmt: skip
    return entry("leased", lease=lease)


def record(**boxes: Any) -> dict[str, Any]:
    data = pool_record.new_record(
        "gpu", {"choice": {}}, minimum=0, maximum=4, idle_s=3600, ttl="8h", lease_ttl_s=3600,
        up={"ssh_cidrs": ["203.0.113.7/32"]}, store_url="local",
    )  # fmt: skip
    data["boxes"] = boxes
    return data


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """ORCH_HOME and the faux cloud (its folder), here and in `orch` children."""
    from tests.fixtures.clouds.faux import CLOUD_DIR_ENV, PLUGIN, FauxCloud

    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(CLOUD_DIR_ENV, str(tmp_path / "cloud"))
    monkeypatch.setenv(registry.PLUGINS_ENV, PLUGIN)
    clouds.register("faux", FauxCloud())
    yield {"store": open_store(None), "cloud": tmp_path / "cloud"}
    registry.unregister("faux")


def make_box(env: dict[str, Any], name: str, tags: dict[str, str], cloud_tags: dict[str, str]):
    """A box of this machine on the faux cloud: its record, the tags `orch up` rendered for
    it (terraform.tfvars.json), and an instance in the cloud carrying `cloud_tags`."""
    directory = box_directory(name)
    directory.mkdir(parents=True)
    Box(name=name, directory=directory, cloud="faux", region="faux-1", candidate=candidate(),
        state="up", created_at="2026-12-04T09:00:00Z", expires_at=FAR,
        outputs={"instance_id": f"i-{name}"}, owner="me", state_url=None).save()  # fmt: skip
    values = {"name": name, "tags": {**tags, BOX_TAG: name}}
    (directory / "terraform.tfvars.json").write_text(json.dumps(values))
    region = env["cloud"] / "faux-1"
    region.mkdir(parents=True, exist_ok=True)
    instance = {"kind": "instance", "id": f"i-{name}", "tags": {**cloud_tags, BOX_TAG: name}}
    (region / f"i-{name}.json").write_text(json.dumps(instance))


POOL_TAGS = {POOL_TAG: "gpu", POOL_STORE_TAG: "local"}


def orch(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, list[str]]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    try:
        shown = json.loads(out.out)
    except ValueError:
        shown = out.out
    return code, shown, out.err.strip().splitlines()


def one_error(code: int, err: list[str], *words: str) -> None:
    assert code == 2 and len(err) == 1 and err[0].startswith("orch: error: "), err
    assert all(word in err[0] for word in words), err[0]


# ------------------------------------------------------------------------ only its own boxes


def test_reconcile_drops_entries_naming_boxes_that_are_not_the_pool_s(home, capsys):
    make_box(home, "exp1", {}, {})  # an ordinary box
    make_box(home, "gpu-0a0a0a", {}, {})  # an ordinary box with a pool-like name
    make_box(home, "gpu-0b0b0b", POOL_TAGS, {})  # its record was edited; the cloud says no
    make_box(home, "gpu-0c0c0c", {**POOL_TAGS, POOL_STORE_TAG: "s3://other/pools"},
             {**POOL_TAGS, POOL_STORE_TAG: "s3://other/pools"})  # another store's  # fmt: skip
    make_box(home, "gpu-0d0d0d", POOL_TAGS, POOL_TAGS)  # the pool's own, about to expire
    forged = {name: entry() for name in ("exp1", "gpu-0a0a0a", "gpu-0b0b0b", "gpu-0c0c0c")}
    home["store"].create(KEY, record(**forged, **{"gpu-0d0d0d": entry(expires=SOON)}))

    code, result, err = orch(capsys, "pool", "reconcile", "gpu", "--json")
    assert code == 0, err
    assert not box_exists("gpu-0d0d0d")  # the pool's own box was destroyed (the others: below)
    actions = result["actions"]
    assert actions["expired_destroyed"] == ["gpu-0d0d0d"] and actions["failed"] == []
    dropped = {line.split(" ")[0]: line for line in actions["dropped"]}
    assert sorted(dropped) == ["exp1", "gpu-0a0a0a", "gpu-0b0b0b", "gpu-0c0c0c"]
    assert "not a box name of pool gpu" in dropped["exp1"]
    assert "record here does not name this pool" in dropped["gpu-0a0a0a"]
    assert "instance i-gpu-0b0b0b in Faux is not tagged" in dropped["gpu-0b0b0b"]
    assert "record here does not name this pool" in dropped["gpu-0c0c0c"]
    for name in ("exp1", "gpu-0a0a0a", "gpu-0b0b0b", "gpu-0c0c0c"):
        assert box_exists(name) and (home["cloud"] / "faux-1" / f"i-{name}.json").exists()
    assert home["store"].read(KEY).data["boxes"] == {}  # every entry dropped or done


def test_release_dirty_of_a_forged_lease_leaves_the_box_alone(home, capsys):
    make_box(home, "gpu-0a0a0a", {}, {})
    home["store"].create(KEY, record(**{"gpu-0a0a0a": leased()}))
    code, result, err = orch(capsys, "pool", "release", "gpu", "gpu-0a0a0a", "--lease", LEASE_ID,
                             "--dirty", "--json")  # fmt: skip
    assert code == 0, err
    assert result["outcome"] == "dropped: not a box of this pool"
    assert box_exists("gpu-0a0a0a")
    assert home["store"].read(KEY).data["boxes"] == {}


def test_when_the_cloud_cannot_be_asked_the_box_is_left_alone_and_kept(home, capsys, monkeypatch):
    from tests.fixtures.clouds.faux import CLOUD_DIR_ENV

    make_box(home, "gpu-0d0d0d", POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{"gpu-0d0d0d": entry(expires=SOON)}))
    monkeypatch.delenv(CLOUD_DIR_ENV)  # the faux cloud now answers NoCredentials
    code, result, err = orch(capsys, "pool", "reconcile", "gpu", "--json")
    assert code == 1 and box_exists("gpu-0d0d0d")
    (failed,) = result["actions"]["failed"]
    assert failed.startswith("gpu-0d0d0d: cannot tell whether box gpu-0d0d0d is this pool's")
    assert err[-1].startswith("orch: error: pool gpu: 1 box failed to reconcile")
    assert "gpu-0d0d0d" in home["store"].read(KEY).data["boxes"]  # for a later reconcile


# ------------------------------------------------------------------------ someone else's lease


def test_release_without_the_lease_id_is_refused_unless_forced(home, capsys):
    home["store"].create(KEY, record(**{"gpu-0e0e0e": leased(), "gpu-0f0f0f": leased()}))
    code, _, err = orch(capsys, "pool", "release", "gpu", "gpu-0e0e0e")
    one_error(code, err, "box gpu-0e0e0e is leased by 'elsewhere:1:abcdef'", "--lease ID")
    code, _, err = orch(capsys, "pool", "release", "gpu", "gpu-0e0e0e", "--lease", "f" * 16)
    one_error(code, err, "leased under another lease now")
    assert home["store"].read(KEY).data["boxes"]["gpu-0e0e0e"]["state"] == "leased"
    code, result, err = orch(capsys, "pool", "release", "gpu", "gpu-0e0e0e", "--lease", LEASE_ID,
                             "--dirty", "--json")  # fmt: skip
    assert code == 0 and result["outcome"] == "destroyed", err
    code, result, err = orch(capsys, "pool", "release", "gpu", "gpu-0f0f0f", "--force",
                             "--dirty", "--json")  # fmt: skip
    assert code == 0 and result["outcome"] == "destroyed", err
    assert home["store"].read(KEY).data["boxes"] == {}


# ------------------------------------------------------------------------ damaged records


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("min", "2", "min '2' is not a whole number"),
        ("min", -1, "min -1 is not a whole number from 0 to 64"),
        ("max", -3, "max -3 is not a whole number"),
        ("max", True, "max True is not a whole number"),
        ("max", 1000, "max 1000 is not a whole number"),
        ("lease_ttl_s", "2h", "lease_ttl_s '2h' is not a number of seconds"),
        ("lease_ttl_s", float("nan"), "lease_ttl_s nan is not a number of seconds"),
        ("idle_s", None, "idle_s None is not a number of seconds"),
        ("up", [], "up [] is not a dict"),
    ],
)
def test_damaged_settings_are_one_line_and_exit_2(home, capsys, field, value, words):
    data = record(**{"gpu-0a0a0a": entry()})
    data[field] = value
    home["store"].create(KEY, data)
    for command in ("status", "lease", "reconcile"):
        code, _, err = orch(capsys, "pool", command, "gpu")
        one_error(code, err, "pool gpu: the record is damaged", words)
    assert home["store"].read(KEY).data["boxes"].keys() == {"gpu-0a0a0a"}  # left as it was


DAMAGED = {
    "gpu-1a1a1a": ["not", "an", "object"],
    "gpu-2a2a2a": "ready",
    "gpu-3a3a3a": {**entry(), "since": 1733300000},
    "gpu-4a4a4a": {**entry(), "state": "sleeping"},
    "gpu-5a5a5a": {**leased(), "lease": {"id": LEASE_ID, "holder": "h"}},
    "gpu-6a6a6a": {**entry(), "box": {"expires_at": 5}},
    "gpu-7a7a7a": {**leased(), "lease": {**leased()["lease"], "holder": "\x1b]0;pwned\x07"}},
    "gpu-8a8a8a": {**entry(), "since": "yesterday"},
    "../../etc": entry(),
    "GPU-9A9A9A": entry(),
    "gpu-": entry(),
}


def test_damaged_entries_are_skipped_and_reported_and_the_rest_works(home, capsys):
    home["store"].create(KEY, record(**DAMAGED, **{"gpu-0a0a0a": entry()}))
    code, result, err = orch(capsys, "pool", "status", "gpu", "--json")
    assert code == 0, err
    assert [row["box"] for row in result["boxes"]] == ["gpu-0a0a0a"]
    skipped = {row["box"]: row["why"] for row in result["skipped"]}
    assert sorted(skipped) == sorted(DAMAGED)
    assert skipped["gpu-1a1a1a"] == "is not an object but list"
    assert skipped["gpu-3a3a3a"] == "has a bad since 1733300000"
    assert skipped["gpu-5a5a5a"].startswith("has a lease with a bad expires_at")
    assert "\x1b" not in json.dumps(result) and all("\x1b" not in line for line in err)
    assert sum("skipping damaged entry" in line for line in err) == len(DAMAGED)
    assert home["store"].read(KEY).data["boxes"].keys() == {*DAMAGED, "gpu-0a0a0a"}  # read only

    code, result, err = orch(capsys, "pool", "lease", "gpu", "--wait", "0", "--json")
    assert code == 0 and result["box"] == "gpu-0a0a0a", err
    assert list(home["store"].read(KEY).data["boxes"]) == ["gpu-0a0a0a"]  # the write left them out


def test_one_damaged_entry_never_stops_reconcile(home, capsys):
    make_box(home, "gpu-0d0d0d", POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**DAMAGED, **{"gpu-0d0d0d": entry(expires=SOON)}))
    code, result, err = orch(capsys, "pool", "reconcile", "gpu", "--json")
    assert code == 0, err
    assert result["actions"]["expired_destroyed"] == ["gpu-0d0d0d"]
    assert not box_exists("gpu-0d0d0d")
    assert len(result["actions"]["dropped"]) == len(DAMAGED)
    assert home["store"].read(KEY).data["boxes"] == {}


# ------------------------------------------------------------------------ destroys at once


def test_reconcile_destroys_what_it_claims_at_once_each_in_a_child(home, capsys, monkeypatch):
    """Stale work of every kind is claimed first and then destroyed in one batch of
    `orch pool _destroy` children (real processes); a box whose record cannot be read fails
    alone, and its entry is kept for the next reconcile."""
    from orchestrator.pool import members
    from orchestrator.provision.boxes import RECORD

    stale = {"gpu-1b1b1b": "provisioning", "gpu-2b2b2b": "resetting", "gpu-3b3b3b": "destroying"}
    for name in (*stale, "gpu-4b4b4b"):
        make_box(home, name, POOL_TAGS, POOL_TAGS)
    (box_directory("gpu-4b4b4b") / RECORD).write_text("{not json")
    entries = {name: entry(state) for name, state in stale.items()}  # since long ago: stale
    home["store"].create(KEY, record(**entries, **{"gpu-4b4b4b": entry("provisioning")}))
    batches: list[list[str]] = []
    real = members.destroy_boxes

    def destroy_boxes(pool: Any, names: list[str]) -> tuple[list[str], list[str]]:
        batches.append(list(names))
        return real(pool, names)

    monkeypatch.setattr(members, "destroy_boxes", destroy_boxes)

    code, result, err = orch(capsys, "pool", "reconcile", "gpu", "--json")
    assert code == 1, err
    assert batches == [sorted(stale)]  # one batch, all three
    assert result["actions"]["stale_removed"] == sorted(stale)
    (failed,) = result["actions"]["failed"]
    assert failed.startswith("gpu-4b4b4b: cannot read box record")
    assert not any(box_exists(name) for name in stale) and box_exists("gpu-4b4b4b")
    assert home["store"].read(KEY).data["boxes"].keys() == {"gpu-4b4b4b"}


def test_idle_boxes_above_min_are_claimed_oldest_first(home):
    from orchestrator.pool import manager

    oldest, older, newest = "2026-12-04T08:00:00Z", "2026-12-04T09:00:00Z", "2026-12-04T10:00:00Z"
    data = record(**{"gpu-1c1c1c": entry(since=older), "gpu-2c2c2c": entry(since=oldest),
                     "gpu-3c3c3c": entry(since=newest), "gpu-4c4c4c": leased(),
                     "gpu-5c5c5c": entry(since=iso(datetime.now(UTC)))})  # fmt: skip
    data["min"] = 3
    home["store"].create(KEY, data)
    pool = manager.open_pool("gpu", None, print)
    assert manager._claim_idle(pool) == ["gpu-2c2c2c", "gpu-1c1c1c"]  # 5 boxes down to 3
    states = {name: e["state"] for name, e in home["store"].read(KEY).data["boxes"].items()}
    assert [name for name, state in sorted(states.items()) if state == "destroying"] == [
        "gpu-1c1c1c", "gpu-2c2c2c"]  # fmt: skip
    assert manager._claim_idle(pool) == []  # at --min: nothing more


def test_a_destroy_that_fails_keeps_the_entry_for_a_later_reconcile(home, monkeypatch):
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members
    from orchestrator.provision import teardown

    make_box(home, "gpu-0d0d0d", POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{"gpu-0d0d0d": entry("destroying")}))

    def fails(name: str, *_: Any, **__: Any) -> None:
        raise OrchError(f"Terraform could not destroy box {name}")

    real_down = teardown.down
    monkeypatch.setattr(teardown, "down", fails)
    pool = manager.open_pool("gpu", None, print)
    with pytest.raises(OrchError, match="could not destroy box gpu-0d0d0d"):
        members.destroy(pool, "gpu-0d0d0d")
    assert home["store"].read(KEY).data["boxes"]["gpu-0d0d0d"]["state"] == "destroying"
    assert box_exists("gpu-0d0d0d")
    monkeypatch.setattr(teardown, "down", real_down)  # the next try works
    assert members.destroy(pool, "gpu-0d0d0d") and not box_exists("gpu-0d0d0d")
    assert home["store"].read(KEY).data["boxes"] == {}


def test_reconcile_probes_the_ready_boxes_at_once_and_replaces_the_silent(home, monkeypatch):
    """Three ready boxes: two do not answer over SSH, one does. Each probe waits until all three
    are under way, so probes run one after another fail the test (the barrier breaks)."""
    import threading

    from orchestrator.check.transport import CommandResult, Unreachable
    from orchestrator.pool import manager, members

    names = ("gpu-1a1a1a", "gpu-2a2a2a", "gpu-3a3a3a")
    for name in names:
        make_box(home, name, POOL_TAGS, POOL_TAGS)
    data = record(**{name: entry() for name in names})
    data["min"] = 1  # the box that answers stays, not retired as idle
    home["store"].create(KEY, data)
    all_under_way = threading.Barrier(len(names), timeout=60)

    class Probe:
        def __init__(self, box: Box) -> None:
            self.box = box

        def run(self, script: str, timeout: float, *, on_stdin: bool = False) -> CommandResult:
            all_under_way.wait()
            if self.box.name == "gpu-2a2a2a":
                return CommandResult(0, "", "")
            raise Unreachable("connection refused")

    monkeypatch.setattr(members, "transport", lambda pool, box: Probe(box))
    monkeypatch.setattr(manager.health, "PROBE_TIMEOUT_S", 0)  # one try each
    said: list[str] = []
    result = manager.reconcile(manager.open_pool("gpu", None, said.append))
    assert not all_under_way.broken
    assert result["actions"]["replaced"] == ["gpu-1a1a1a", "gpu-3a3a3a"], said
    assert result["actions"]["failed"] == []
    assert [n for n in names if box_exists(n)] == ["gpu-2a2a2a"]  # destroyed in children
    assert any("gpu-1a1a1a does not answer over SSH (probe: connection refused" in s for s in said)
    assert list(home["store"].read(KEY).data["boxes"]) == ["gpu-2a2a2a"]


def test_status_never_prints_record_text_with_escapes(home, capsys):
    """The box summary in an entry is shown by `status` as text: a store writer's ESC
    sequences there would clear the screen or forge lines. Such an entry is damaged."""
    forged = {**entry(), "box": {"expires_at": FAR, "instance_type": "\x1b[2J\x1b[Hg5.xlarge",
                                 "public_ip": "203.0.113.9\x1b]0;pwned\x07"}}  # fmt: skip
    home["store"].create(KEY, record(**{"gpu-0a0a0a": forged, "gpu-0b0b0b": entry()}))
    code, out, err = orch(capsys, "pool", "status", "gpu")
    assert code == 0, err
    assert "\x1b" not in out and all("\x1b" not in line for line in err)
    assert "gpu-0b0b0b" in out and "gpu-0a0a0a       skipped: it has a bad box instance_type" in out


def test_what_a_box_says_reaches_the_pool_s_lines_escaped(home, capsys, monkeypatch):
    """After a lease the box is the lessee's: its shell can print anything on stderr. The
    reset's failure (the script's last stderr line) and a probe's (ssh's last line, where a
    box that drops the session before orch's exit marker speaks) reach `release` and
    `reconcile` escaped, never as ESC sequences."""
    from orchestrator.check.transport import CommandResult, Unreachable
    from orchestrator.pool import manager, members

    hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[Hreset ok"

    class Box_:
        def __init__(self, box: Box) -> None:
            self.box = box

        def run(self, script: str, timeout: float, *, on_stdin: bool = False) -> CommandResult:
            if self.box.name == "gpu-0a0a0a":
                return CommandResult(1, "", f"rm: {hostile}\n")
            raise Unreachable(f"ssh ubuntu@{self.box.name}: {hostile}")

    monkeypatch.setattr(members, "transport", lambda pool, box: Box_(box))
    monkeypatch.setattr(manager.health, "PROBE_TIMEOUT_S", 0)
    for name in ("gpu-0a0a0a", "gpu-0b0b0b"):
        make_box(home, name, POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{"gpu-0a0a0a": leased(), "gpu-0b0b0b": entry()}))

    code, out, err = orch(capsys, "pool", "release", "gpu", "gpu-0a0a0a", "--lease", LEASE_ID)
    assert code == 0 and out.strip() == "box gpu-0a0a0a: destroyed", err
    assert any("failed its reset" in line and "\\x1b]0;pwned" in line for line in err), err
    code, out, err = orch(capsys, "pool", "reconcile", "gpu")
    assert code == 0 and "replaced gpu-0b0b0b" in out, err
    assert any("does not answer over SSH" in line and "\\x1b[2J" in line for line in err), err
    assert "\x1b" not in out and all("\x1b" not in line for line in err)
    # A failure of one box's step is listed under `failed`, which `reconcile` prints as text.
    from orchestrator.errors import OrchError

    def fails() -> None:
        raise OrchError(f"asking the box: {hostile}")

    actions: dict[str, list[str]] = {"failed": []}
    manager._isolated(manager.open_pool("gpu", None, print), actions, "gpu-0c0c0c", fails)
    assert actions["failed"] == [
        "gpu-0c0c0c: asking the box: \\x1b]0;pwned\\x07\\x1b[2J\\x1b[Hreset ok"
    ]


@pytest.mark.parametrize("failure", ["s3", "interrupt"])
def test_a_lease_whose_box_cannot_be_reached_here_is_undone(home, monkeypatch, failure):
    """`lease` writes the lease first, then finds the box here (on another machine: rebuilt from
    the pool's S3 state and key). When that fails (S3 does not answer, Ctrl-C), nobody has the
    lease id: the lease is undone, so the box is not held for nothing until its lease ends."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members

    def fails(pool: Any, name: str, data: Any = None) -> None:
        if failure == "interrupt":
            raise KeyboardInterrupt
        raise OrchError("cannot read pools/gpu/state/gpu-0a0a0a from s3://b/p: timed out")

    home["store"].create(KEY, record(**{"gpu-0a0a0a": entry(), "gpu-0b0b0b": leased()}))
    monkeypatch.setattr(members, "materialize", fails)
    with pytest.raises(KeyboardInterrupt if failure == "interrupt" else OrchError):
        manager.lease(manager.open_pool("gpu", None, print), 0, None)
    boxes = home["store"].read(KEY).data["boxes"]
    assert boxes["gpu-0a0a0a"]["state"] == "ready" and boxes["gpu-0a0a0a"]["lease"] is None
    assert boxes["gpu-0b0b0b"] == leased()  # someone else's lease is not touched


def test_a_record_nested_too_deep_for_json_is_one_line_not_a_traceback(home, capsys):
    """json.loads raises RecursionError, not ValueError, for nesting deeper than the
    interpreter's limit: a store writer could make every pool command, and the sweeper that
    reads pool records, stop with a traceback."""
    from datetime import datetime

    from orchestrator.sweep import Resource, _reap, group_resources

    path = home["store"].root / KEY
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"boxes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    code, _, err = orch(capsys, "pool", "status", "gpu")
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"orch: error: record {KEY} in ") and "is damaged" in err[0]
    make_box(home, "gpu-0a0a0a", POOL_TAGS, POOL_TAGS)
    tags = {BOX_TAG: "gpu-0a0a0a", **POOL_TAGS}
    instance = Resource("instance", "i-1", "g5.xlarge", tags, "faux-1", "running")
    (group,) = group_resources("faux", "faux-1", [instance], datetime.now(UTC))
    assert not _reap(group, datetime.now(UTC), {}) and "record unreadable" in group.reason


def test_work_finished_never_overwrites_a_claim_made_meanwhile(home, monkeypatch):
    """`pool delete` (or reconcile) claims a box for destruction while a release resets it, or
    while a lease starts it: the finished reset or start must not turn the entry back into a
    ready or leased box, which another runner could lease while it is being destroyed."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members, reset

    make_box(home, "gpu-0a0a0a", POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{"gpu-0a0a0a": leased(), "gpu-0b0b0b": entry()}))
    pool = manager.open_pool("gpu", None, print)

    def claimed_meanwhile(name: str) -> None:
        def claim(data: dict[str, Any]) -> None:
            pool_record.set_state(data["boxes"][name], "destroying", "deleter:1:abcdef")

        manager.open_pool("gpu", None, print).change(claim)

    monkeypatch.setattr(members, "transport", lambda pool, box: None)
    monkeypatch.setattr(reset, "reset_box", lambda box, *_: claimed_meanwhile(box.name))
    outcome = manager.release(pool, "gpu-0a0a0a", LEASE_ID, dirty=False)
    assert outcome == "not made ready: the pool is destroying it"
    assert home["store"].read(KEY).data["boxes"]["gpu-0a0a0a"]["by"] == "deleter:1:abcdef"

    pool.change(lambda d: pool_record.set_state(d["boxes"]["gpu-0b0b0b"], "provisioning"))

    def started(pool: Any, name: str) -> Box:  # the box came up while it was claimed
        claimed_meanwhile(name)
        return members.load_box("gpu-0a0a0a")

    monkeypatch.setattr(members, "provision", started)
    with pytest.raises(OrchError, match="claimed for destruction while it started"):
        members.provision_entry(pool, "gpu-0b0b0b", lease_for=pool.holder)
    entry_b = home["store"].read(KEY).data["boxes"]["gpu-0b0b0b"]
    assert entry_b["state"] == "destroying" and entry_b["lease"] is None


@pytest.mark.parametrize("removed", ["entry", "record"])
@pytest.mark.parametrize("came_up", [True, False])
def test_a_box_whose_entry_goes_while_it_starts_is_destroyed(home, monkeypatch, removed, came_up):
    """`pool delete` (or a reconcile that could not find the box yet, or another process)
    removes a `provisioning` entry, or the whole record, while its box starts: nobody else
    knows of the box now, so the starter destroys it, whether it came up or failed its
    check, instead of leaving it billing until its TTL or the sweeper."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members

    name = "gpu-0e0e0e"
    home["store"].create(KEY, record(**{name: entry("provisioning")}))
    pool = manager.open_pool("gpu", None, print)

    def started(pool: Any, box_name: str) -> Box:  # its entry goes while the box comes up
        make_box(home, box_name, POOL_TAGS, POOL_TAGS)
        if removed == "entry":
            manager.open_pool("gpu", None, print).change(lambda d: d["boxes"].pop(box_name))
        else:
            home["store"].delete(KEY)
        if not came_up:
            raise OrchError(f"box {box_name} does not match the pool's plan: 1 GPU, not 8")
        return members.load_box(box_name)

    monkeypatch.setattr(members, "provision", started)
    words = "removed from the pool while it started; it was destroyed" if came_up else "plan"
    with pytest.raises(OrchError, match=words):
        members.provision_entry(pool, name, lease_for=pool.holder)
    assert not box_exists(name)  # torn down by `orch down` (module docstring)
    if removed == "entry":
        assert home["store"].read(KEY).data["boxes"] == {}


def test_delete_never_takes_a_box_leased_after_it_looked(home, monkeypatch):
    """`pool delete` without --force refuses leased boxes; a runner that leases one between
    delete's read of the record and its claim of every entry keeps it."""
    from orchestrator.errors import UsageError
    from orchestrator.pool import manager

    make_box(home, "gpu-0a0a0a", POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{"gpu-0a0a0a": entry()}))
    real_read = manager.Pool.read
    runner = manager.open_pool("gpu", None, print)

    def read_then_lease(pool: Any) -> dict[str, Any]:
        data = real_read(pool)
        if pool is not runner:  # delete looked (the box was ready): now a CI job leases it
            runner.change(lambda d: pool_record.lease_box(d, "gpu-0a0a0a", runner.holder, 3600))
        return data

    monkeypatch.setattr(manager.Pool, "read", read_then_lease)
    with pytest.raises(UsageError, match="has leased boxes"):
        manager.delete(manager.open_pool("gpu", None, print), force=False)
    assert box_exists("gpu-0a0a0a")
    assert home["store"].read(KEY).data["boxes"]["gpu-0a0a0a"]["state"] == "leased"


def test_run_on_a_pool_gives_the_box_back_when_the_run_raises(monkeypatch, tmp_path):
    """`orch run --pool` releases the box it leased (dirty: a failed run may have left
    anything) also when the run ends in an error that is not orch's own (a full disk here:
    execute() stops the job and raises it), instead of holding it until the lease runs out."""
    from orchestrator.commands import run as run_command
    from orchestrator.pool import manager
    from orchestrator.run import session
    from orchestrator.run.spec import RunSpec

    released: list[tuple[str, str, bool]] = []
    monkeypatch.setattr(manager, "open_pool", lambda *_a, **_k: "the pool")
    monkeypatch.setattr(manager, "lease", lambda *_a: {"box": "gpu-0a0a0a", "lease_id": LEASE_ID})

    def release(pool: Any, box: str, lease_id: str, dirty: bool) -> str:
        released.append((box, lease_id, dirty))
        return "destroyed"

    def full_disk(self: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manager, "release", release)
    monkeypatch.setattr(session.Run, "execute", full_disk)
    spec = RunSpec(command=["true"], workdir=tmp_path)
    request = session.RunRequest(spec=spec, box_name="pool-box")
    options = {"as_json": True, "pool": "gpu", "pool_store": None, "lease_wait": 0.0}
    with pytest.raises(OSError, match="No space left"):
        run_command._run_on_pool(request, options, None)
    assert released == [("gpu-0a0a0a", LEASE_ID, True)]


@pytest.mark.parametrize("came_up", [True, False])
def test_a_box_claimed_while_it_starts_is_destroyed_once_by_its_starter(home, monkeypatch, came_up):
    """`pool delete` claims every entry while one box is still being made, where delete cannot
    find it yet (on another machine, or before `up` wrote its record). The starter finishes
    (the box came up, or failed its check) while delete is at work: after delete looked for the
    box and before it drops the entry, or (when delete leaves the entry to its starter) before
    it deletes the record. Exactly one of them destroys the box, once. Before, the starter saw
    `destroying` and left the box to delete, which had found nothing and dropped the entry:
    nobody destroyed it, and it ran on until its TTL or the sweeper."""
    from orchestrator.errors import OrchError
    from orchestrator.plan import Plan
    from orchestrator.pool import manager, members
    from orchestrator.provision import teardown

    name = "gpu-0f0f0f"
    data = record(**{name: entry("provisioning", since=iso(datetime.now(UTC)))})
    data["plan"] = Plan(job={}, estimate={}, choice=candidate(), alternatives=[],
                        created_at="2026-12-04T09:00:00Z").to_dict()  # fmt: skip
    home["store"].create(KEY, data)
    starter = manager.open_pool("gpu", None, print)
    deleter = manager.open_pool("gpu", None, print)
    said: list[str] = []  # what the starter raised
    downs: list[str] = []  # every `orch down` of the box
    real_down, real_drop, real_destroy_boxes = teardown.down, members.drop, members.destroy_boxes

    def started(pool: Any, box_name: str) -> Box:
        make_box(home, box_name, POOL_TAGS, POOL_TAGS)
        if not came_up:
            raise OrchError(f"box {box_name} does not match the pool's plan: 1 GPU, not 8")
        return members.load_box(box_name)

    def starter_finishes() -> None:
        if not said:
            with pytest.raises(OrchError) as raised:
                members.provision_entry(starter, name, lease_for=starter.holder)
            said.append(raised.value.one_line())

    def drop(pool: Any, box_name: str) -> None:  # delete found no box and drops the entry
        if pool is deleter and box_name == name:
            starter_finishes()
        real_drop(pool, box_name)

    def destroy_boxes(pool: Any, names: list[str]) -> tuple[list[str], list[str]]:
        starter_finishes()  # delete has claimed every entry and looked for their boxes
        return real_destroy_boxes(pool, names)

    def down(box_name: str, *args: Any, **kwargs: Any) -> Box:
        downs.append(box_name)
        return real_down(box_name, *args, **kwargs)

    monkeypatch.setattr(members, "provision", started)
    monkeypatch.setattr(members, "drop", drop)
    monkeypatch.setattr(members, "destroy_boxes", destroy_boxes)
    monkeypatch.setattr(teardown, "down", down)
    monkeypatch.setattr(manager, "_delete_tagged_pool_resources", lambda *_: [])
    result = manager.delete(deleter, force=False)
    assert said, "the starter never finished while delete was at work"
    assert downs == [name] and not box_exists(name), (said, downs)
    assert home["store"].read(KEY) is None and result["destroyed"] == []


def test_a_start_that_fails_leaves_the_box_to_a_reconcile_that_claimed_it(home, monkeypatch):
    """A reconcile takes a start silent for over an hour for dead and claims its entry; it
    has found the box and is destroying it when the starter, alive after all, fails its check.
    The box is the reconcile's to destroy: before, the starter took the entry back and
    destroyed the box too, so the reconcile's own `orch down` found nothing and failed."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members
    from orchestrator.provision import teardown

    name = "gpu-0f1f2f"
    make_box(home, name, POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{name: entry("provisioning")}))  # since long ago
    starter = manager.open_pool("gpu", None, print)
    reconciler = manager.open_pool("gpu", None, print)
    assert manager._claim(reconciler, name, "provisioning", "destroying", stale=True)
    downs: list[str] = []
    real_down = teardown.down

    def fails(pool: Any, box_name: str) -> Box:
        raise OrchError(f"box {box_name} does not match the pool's plan: 1 GPU, not 8")

    def down(box_name: str, *args: Any, **kwargs: Any) -> Box:
        downs.append(box_name)
        if len(downs) == 1:  # the reconcile's destroy has begun: now the starter fails
            with pytest.raises(OrchError, match="plan"):
                members.provision_entry(starter, name)
        return real_down(box_name, *args, **kwargs)

    monkeypatch.setattr(members, "provision", fails)
    monkeypatch.setattr(teardown, "down", down)
    assert members.destroy(reconciler, name)
    assert downs == [name] and not box_exists(name)
    assert home["store"].read(KEY).data["boxes"] == {}


def test_a_reset_that_fails_leaves_the_box_to_a_delete_that_claimed_it(home, monkeypatch):
    """`pool delete` claims a box (`destroying`, under its holder) while a release resets it,
    and is destroying it when the reset fails (the box is going away under it). The box is
    the claimant's: before, the release overwrote the claim (`by` its own) and destroyed the
    box too, its `orch down` overlapping the claimant's, so one of them failed with
    NoSuchBox."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members, reset
    from orchestrator.provision import teardown

    name = "gpu-0a1a2a"
    make_box(home, name, POOL_TAGS, POOL_TAGS)
    home["store"].create(KEY, record(**{name: leased()}))
    releaser = manager.open_pool("gpu", None, print)
    deleter = manager.open_pool("gpu", None, print)
    downs: list[str] = []  # every `orch down` of the box
    claimant: list[bool] = []  # the claimant's destroy: begun
    real_down = teardown.down

    def claimant_destroys() -> None:  # what delete's `orch pool _destroy` child does
        if not claimant:
            claimant.append(True)
            assert members.destroy(deleter, name)

    def claimed_while_it_resets(box: Box, *_: Any) -> None:
        def claim(data: dict[str, Any]) -> bool:  # as delete's claim_all does
            return pool_record.claim_destroy(data["boxes"][name], deleter.holder)

        assert deleter.change(claim)[1]
        raise OrchError(f"resetting box {box.name}: ssh: connection closed by remote host")

    def down(box_name: str, *args: Any, **kwargs: Any) -> Box:
        downs.append(box_name)
        claimant_destroys()  # another down has begun: the claimant's overlaps it
        return real_down(box_name, *args, **kwargs)

    monkeypatch.setattr(members, "transport", lambda pool, box: None)
    monkeypatch.setattr(reset, "reset_box", claimed_while_it_resets)
    monkeypatch.setattr(teardown, "down", down)
    outcome = manager.release(releaser, name, LEASE_ID, dirty=False)
    assert outcome == "not made ready: the pool is destroying it"
    kept = home["store"].read(KEY).data["boxes"][name]
    assert (kept["state"], kept["by"]) == ("destroying", deleter.holder)  # the claim stands
    claimant_destroys()
    assert downs == [name] and not box_exists(name)
    assert home["store"].read(KEY).data["boxes"] == {}


@pytest.mark.parametrize("reset_ok", [True, False])
def test_a_reset_that_ends_after_pool_delete_is_not_an_error(home, monkeypatch, reset_ok):
    """`pool delete` claims a box while a release resets it, destroys it and deletes the
    record before the reset ends. The release says the pool destroyed the box: before, it
    failed with `no pool named 'gpu'` (exit 2) whether the reset passed or failed."""
    from orchestrator.errors import OrchError
    from orchestrator.plan import Plan
    from orchestrator.pool import manager, members, reset
    from orchestrator.provision import teardown

    name = "gpu-0b1b2b"
    make_box(home, name, POOL_TAGS, POOL_TAGS)
    data = record(**{name: leased()})
    data["plan"] = Plan(job={}, estimate={}, choice=candidate(), alternatives=[],
                        created_at="2026-12-04T09:00:00Z").to_dict()  # fmt: skip
    home["store"].create(KEY, data)
    releaser = manager.open_pool("gpu", None, print)
    downs: list[str] = []  # `orch down` in this process (delete's run in its children)

    def deleted_while_it_resets(box: Box, *_: Any) -> None:
        result = manager.delete(manager.open_pool("gpu", None, print), force=False)
        assert result["destroyed"] == [name]
        if not reset_ok:
            raise OrchError(f"resetting box {box.name}: ssh: connection closed by remote host")

    monkeypatch.setattr(members, "transport", lambda pool, box: None)
    monkeypatch.setattr(reset, "reset_box", deleted_while_it_resets)
    monkeypatch.setattr(teardown, "down", lambda box_name, *_: downs.append(box_name))
    monkeypatch.setattr(manager, "_delete_tagged_pool_resources", lambda *_: [])
    outcome = manager.release(releaser, name, LEASE_ID, dirty=False)
    assert outcome == "not made ready: the pool is destroying it"
    assert downs == [] and not box_exists(name) and home["store"].read(KEY) is None
