"""The pool's record rules (which box a lease takes, counting, expiry), the sweeper's verdict on
pool boxes, and `orch pool` input checks. No cloud: the record is a local store's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clouds.base import BOX_TAG, EXPIRES_TAG, POOL_STORE_TAG, POOL_TAG
from orchestrator.errors import UsageError
from orchestrator.pool import record as pool_record
from orchestrator.pool.store import LocalStore
from orchestrator.sweep import Resource, _reap, group_resources
from tests.support import candidate, cli_refused, plan_file

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def record_with(**boxes: dict[str, Any]) -> dict[str, Any]:
    data = pool_record.new_record(
        "gpu", {"choice": {}}, minimum=1, maximum=3, idle_s=600, ttl="8h", lease_ttl_s=3600,
        up={"ssh_cidrs": []}, store_url="local",
    )  # fmt: skip
    data["boxes"] = boxes
    return data


def box(state: str, since: str, expires: str | None = None, lease_until: str | None = None):
    entry = {"state": state, "since": since, "by": None, "lease": None,
             "box": {"expires_at": expires}}  # fmt: skip
    if lease_until:
        entry["lease"] = {"id": "x", "holder": "h", "expires_at": lease_until}
    return entry


def test_a_lease_takes_the_longest_idle_box_that_outlives_it():
    far = iso(datetime.now(UTC) + timedelta(hours=5))
    soon = iso(datetime.now(UTC) + timedelta(minutes=10))
    data = record_with(
        a=box("ready", "2026-12-03T10:00:00Z", far),
        b=box("ready", "2026-12-03T09:00:00Z", soon),  # idle longest, but ends within a lease
        c=box("ready", "2026-12-03T09:30:00Z", far),
        d=box("leased", "2026-12-03T08:00:00Z", far, far),
    )
    assert pool_record.pick_ready(data, 3600) == "c"
    lease = pool_record.lease_box(data, "c", "me", 3600)
    assert data["boxes"]["c"]["state"] == "leased" and data["boxes"]["c"]["lease"] == lease
    assert pool_record.pick_ready(data, 3600) == "a"
    assert pool_record.pick_ready(record_with(d=box("leased", "x", far, far)), 60) is None


def test_counting_expiry_and_stale_work():
    data = record_with(
        a=box("ready", iso(NOW)),
        b=box("destroying", iso(NOW)),
        c=box("provisioning", iso(NOW - timedelta(hours=2))),
    )
    assert pool_record.counted(data) == 2  # a box being destroyed no longer counts
    assert pool_record.stale(data["boxes"]["c"], NOW)
    assert not pool_record.stale(data["boxes"]["a"], NOW)
    leased = box("leased", iso(NOW), lease_until=iso(NOW - timedelta(seconds=1)))
    assert pool_record.lease_expired(leased, NOW)
    assert not pool_record.lease_expired(
        box("leased", iso(NOW), lease_until=iso(NOW + timedelta(1))), NOW
    )


def test_a_claim_leaves_a_box_still_being_made_to_its_starter_until_it_is_stale():
    """Only a box's starter can know whether it exists before `up` ends: a claim of a start
    (or of a destroy left to its starter) leaves it to the starter; one silent for over an
    hour is taken for dead, and the claimant destroys the box (and the mark goes)."""
    now = iso(datetime.now(UTC))
    starting = {"state": "provisioning", "since": now, "by": "starter", "lease": None}
    assert not pool_record.claim_destroy(starting, "deleter")
    assert pool_record.left_to_starter(starting)
    assert (starting["by"], starting["since"]) == ("starter", now)
    assert not pool_record.claim_destroy(starting, "deleter-again")  # a second delete
    assert starting["by"] == "starter"
    for entry in (dict(starting, since="2026-12-01T10:00:00Z"),
                  box("provisioning", "2026-12-01T10:00:00Z")):  # fmt: skip
        assert pool_record.claim_destroy(entry, "deleter")
        assert entry["by"] == "deleter" and not pool_record.left_to_starter(entry)
    ready = box("ready", now)
    assert pool_record.claim_destroy(ready, "deleter") and ready["state"] == "destroying"
    assert not pool_record.left_to_starter(ready) and ready["by"] == "deleter"


def test_pool_names_and_sizes():
    assert pool_record.validate_pool_name("gpu-a10") == "gpu-a10"
    for bad in ("", "GPU", "-gpu", "gpu-", "g" * 33, "gpu_a"):
        with pytest.raises(UsageError):
            pool_record.validate_pool_name(bad)
    with pytest.raises(UsageError):
        pool_record.new_record(
            "gpu", {}, minimum=3, maximum=2, idle_s=1, ttl="1h", lease_ttl_s=60, up={},
            store_url="local",
        )  # fmt: skip


# ------------------------------------------------------------------------------ sweeper


def groups_for(box_name: str, expires: str, pool: str = "gpu") -> list:
    tags = {BOX_TAG: box_name, EXPIRES_TAG: expires, POOL_TAG: pool, POOL_STORE_TAG: "local"}
    resources = [Resource("instance", "i-1", "g5.xlarge", tags, "us-east-1", "running")]
    return group_resources("aws", "us-east-1", resources, NOW)


@pytest.fixture
def local_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalStore:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    from orchestrator.pool.store import open_store

    return open_store(None)  # type: ignore[return-value]


def made_here(*names: str) -> None:
    """This machine's records of boxes it started (a local pool's boxes are made here)."""
    from orchestrator.provision.boxes import Box, box_directory

    for name in names:
        directory = box_directory(name)
        directory.mkdir(parents=True)
        Box(name=name, directory=directory, cloud="aws", region="us-east-1",
            candidate=candidate("g5.xlarge"), state="up", created_at=iso(NOW), expires_at=None,
            outputs={}, owner="me", state_url=None).save()  # fmt: skip


def test_the_sweeper_keeps_a_leased_pool_box_until_its_lease_ends(local_pool):
    made_here("gpu-aaaaaa")
    past, future = iso(NOW - timedelta(hours=1)), iso(NOW + timedelta(hours=1))
    data = record_with(**{"gpu-aaaaaa": box("leased", iso(NOW), past, lease_until=future)})
    local_pool.create(pool_record.record_key("gpu"), data)
    (group,) = groups_for("gpu-aaaaaa", past)
    assert group.expired and not _reap(group, NOW, {})  # expired tag, but under a lease
    assert "leased from pool gpu" in group.reason
    later = NOW + timedelta(hours=2)
    (group,) = groups_for("gpu-aaaaaa", past)
    assert _reap(group, later, {})


def test_the_sweeper_reaps_pool_boxes_whose_pool_or_entry_is_gone(local_pool):
    future = iso(NOW + timedelta(hours=5))
    made_here("gone-aaaaaa", "gpu-bbbbbb", "gpu-cccccc")
    (orphan,) = groups_for("gone-aaaaaa", future, pool="gone")
    assert not orphan.expired and _reap(orphan, NOW, {}) and "pool gone is gone" in orphan.reason
    local_pool.create(pool_record.record_key("gpu"), record_with())
    (unlisted,) = groups_for("gpu-bbbbbb", future)
    assert _reap(unlisted, NOW, {}) and "no longer lists it" in unlisted.reason
    data = record_with(**{"gpu-cccccc": box("ready", iso(NOW), future)})
    local_pool.replace(pool_record.record_key("gpu"), data, local_pool.read(
        pool_record.record_key("gpu")).etag)  # fmt: skip
    (listed,) = groups_for("gpu-cccccc", future)
    assert not _reap(listed, NOW, {})  # a live pool's unexpired box stays


def test_a_local_pool_s_boxes_are_judged_by_expiry_on_another_machine(local_pool):
    """A pool in a local store is this machine's: a sweeper elsewhere (a CI schedule) finds no
    record, or a pool of the same name there, and must not take that for "the pool is gone"
    and destroy boxes under a lease. It leaves them to their expiry, as any box."""
    future, past = iso(NOW + timedelta(hours=5)), iso(NOW - timedelta(minutes=1))
    (elsewhere,) = groups_for("gpu-dddddd", future)  # no record of pool gpu here
    assert not _reap(elsewhere, NOW, {}) and "another machine" in elsewhere.reason
    local_pool.create(pool_record.record_key("gpu"), record_with())  # a "gpu" pool of its own
    (same_name,) = groups_for("gpu-dddddd", future)
    assert not _reap(same_name, NOW, {}) and "another machine" in same_name.reason
    (expired,) = groups_for("gpu-eeeeee", past)
    assert _reap(expired, NOW, {})  # past its expiry: swept as any box


def test_the_sweeper_survives_a_damaged_pool_record(local_pool):
    """Whoever can write the store can write anything: a damaged entry is one the pool no
    longer lists (swept), a record that is not a pool's is unreadable (kept); never a crash
    that stops the sweep of every other box."""
    future = iso(NOW + timedelta(hours=5))
    names = ("gpu-0000aa", "gpu-0000bb", "gpu-0000cc", "gpu-0000dd")
    made_here(*names)
    data = record_with(**{"gpu-0000aa": "ready", "gpu-0000bb": ["leased"],
                          "gpu-0000cc": {**box("leased", iso(NOW)), "lease": "forever"},
                          "gpu-0000dd": box("ready", iso(NOW), future)})  # fmt: skip
    local_pool.create(pool_record.record_key("gpu"), data)
    for name in names[:3]:
        (group,) = groups_for(name, future)
        assert _reap(group, NOW, {}) and "damaged" in group.reason, name
    (fine,) = groups_for("gpu-0000dd", future)
    assert not _reap(fine, NOW, {})
    key = pool_record.record_key("gpu")
    local_pool.replace(key, {**data, "boxes": []}, local_pool.read(key).etag)
    (group,) = groups_for("gpu-0000dd", future)
    assert not _reap(group, NOW, {}) and "record unreadable" in group.reason


# ------------------------------------------------------------------------------ CLI


def refused(capsys: pytest.CaptureFixture[str], *argv: str, words: tuple[str, ...]) -> None:
    cli_refused(capsys, *argv, words=words)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--ttl", "none"), ("expiry",)),
        (("--ttl", "1h", "--lease-ttl", "2h"), ("--lease-ttl",)),
        (("--min", "3", "--max", "2"), ("--min",)),
        (("--idle", "soon"), ("--idle",)),
        (("--store", "gs://bucket/x"), ("pool store",)),
        (("--ssh-cidr", "0.0.0.0/0"), ("0.0.0.0/0",)),
    ],
)
def test_bad_pool_options_are_refused_before_any_box(tmp_path, monkeypatch, capsys, extra, words):
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    refused(capsys, "pool", "create", "gpu", "--plan", plan, "--ssh-cidr", "203.0.113.7/32",
            *extra, words=words)  # fmt: skip
    assert not (tmp_path / "home" / "boxes").exists()


def test_pool_commands_on_an_unknown_pool(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    refused(capsys, "pool", "status", "nonesuch", words=("no pool named 'nonesuch'",))
    # lease and release change the record without reading it first: the same answer, not
    # exit 1 naming the store's key (README: bad input is exit 2)
    refused(capsys, "pool", "lease", "nonesuch", "--wait", "1s",
            words=("no pool named 'nonesuch'",))  # fmt: skip
    for how in (("--lease", "0123456789abcdef"), ("--force",), ("--dirty",)):
        refused(capsys, "pool", "release", "nonesuch", "nonesuch-1a2b3c", *how,
                words=("no pool named 'nonesuch'",))  # fmt: skip
    refused(capsys, "pool", "lease", "Bad_Name", words=("bad pool name",))
    refused(capsys, "pool", "release", "gpu", "Not-A-Box!", words=("bad box name",))


# ------------------------------------------------------------------------------ OSS


@pytest.mark.parametrize(
    ("variable", "endpoint"),
    [
        ("AWS_ENDPOINT_URL_S3", "https://s3.oss-cn-hangzhou.aliyuncs.com"),
        ("AWS_ENDPOINT_URL", "https://oss-cn-beijing.aliyuncs.com"),
        ("AWS_ENDPOINT_URL_S3", "https://OSS-ap-southeast-1-internal.aliyuncs.com:443/"),
    ],
)
def test_a_pool_on_alibaba_oss_is_refused_before_any_request(
    tmp_path, monkeypatch, capsys, variable, endpoint
):
    """OSS has no If-Match compare-and-swap and refuses path-style requests: a pool record
    there is refused with one line, exit 2, and nothing is written or even asked."""
    import socket

    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(variable, endpoint)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(name, proxy)  # any request would arrive here
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    store = ("--store", "s3://pool-bucket/pools")
    words = ("Alibaba OSS", "pools need AWS S3", "conditional writes")
    refused(capsys, "pool", "create", "gpu", "--plan", plan, "--ssh-cidr", "203.0.113.7/32",
            *store, words=words)  # fmt: skip
    for command in ("status", "lease", "reconcile", "delete"):
        refused(capsys, "pool", command, "gpu", *store, words=words)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected
    listener.close()
    home = tmp_path / "home"
    assert not (home / "pools").exists() and not (home / "boxes").exists()


def test_stores_with_conditional_writes_are_not_refused(monkeypatch):
    from orchestrator.pool.store import S3Store, StoreKind, check_conditional_writes, open_store

    for endpoint in (
        "http://127.0.0.1:5000",
        "https://minio.example.com",
        "https://ecs.aliyuncs.com",
    ):
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        check_conditional_writes("s3://b/p")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    store = open_store("s3://pool-bucket/pools")
    assert isinstance(store, S3Store) and store.kind is StoreKind.S3 and store.kind.shared


def test_delete_destroys_every_box_and_keeps_the_record_when_one_fails(
    local_pool, monkeypatch, capfd
):
    """Each box goes to an `orch pool _destroy` child of its own (real processes here). One
    whose record is damaged cannot be destroyed: the others still are, and delete fails,
    naming it, keeping the pool record and asking no cloud what is left."""
    from orchestrator.errors import OrchError
    from orchestrator.pool import manager, members
    from orchestrator.provision.boxes import RECORD, box_directory

    far = iso(datetime.now(UTC) + timedelta(hours=5))
    names = ("gpu-0000aa", "gpu-0000bb", "gpu-0000cc")
    data = record_with(**{name: box("ready", "2026-12-03T10:00:00Z", far) for name in names})
    local_pool.create(pool_record.record_key("gpu"), data)
    damaged = box_directory("gpu-0000bb")
    damaged.mkdir(parents=True)
    (damaged / RECORD).write_text("{not json")
    # The parent's ownership check asks the cloud; here every entry is taken as this pool's.
    monkeypatch.setattr(members, "materialize", lambda pool, name, data=None: name)
    monkeypatch.setattr(manager, "_delete_tagged_pool_resources", pytest.fail)

    pool = manager.open_pool("gpu", None, print)
    with pytest.raises(OrchError) as refused:
        manager.delete(pool, force=False)
    assert "1 of 3 boxes could not be destroyed (gpu-0000bb)" in refused.value.one_line()
    assert "orch pool delete gpu" in refused.value.one_line()
    assert "orch: error: cannot read box record" in capfd.readouterr().err  # the child's line
    assert local_pool.read(pool_record.record_key("gpu")) is not None
    assert set(pool.read()["boxes"]) == {"gpu-0000bb"}  # kept for the next delete; others gone
