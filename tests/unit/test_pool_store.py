"""The warm pool's record store (orchestrator/pool/store.py): the local folder and S3.

S3 runs against a module-scoped moto server behind tests/e2e/conftest.py's CapacityProxy,
which makes conditional writes atomic as S3 does (moto alone lets two racing conditional
PUTs of one key both succeed). The concurrency tests race separate processes.

moto is a prerequisite (tests.support.require: skipped locally without it, fatal in CI).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchError, UsageError
from orchestrator.pool import store as store_module
from orchestrator.pool.store import (
    Conflict,
    LocalStore,
    RecordStore,
    S3Store,
    Versioned,
    open_store,
    update,
)
from tests.e2e.conftest import CapacityProxy

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 20
SLOTS = 5
INCREMENTS = 5


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def s3_proxy(moto_server_url: str) -> Iterator[CapacityProxy]:
    """moto behind the proxy that serializes writes of one object (atomic conditional PUTs)."""
    with CapacityProxy(moto_server_url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def s3_atomic_url(s3_proxy: CapacityProxy) -> str:
    return s3_proxy.url


@pytest.fixture
def s3_env(s3_atomic_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Standard AWS variables for moto, set here and handed to child processes."""
    values = dict(
        AWS_ENDPOINT_URL=s3_atomic_url,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
    )
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
def s3_client(s3_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    import boto3

    return boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")


@pytest.fixture
def bucket(s3_client) -> str:  # noqa: ANN001
    name = "pool-" + uuid.uuid4().hex[:12]
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> RecordStore:
    if kind == "local":
        return LocalStore(tmp_path / "pools")
    bucket = request.getfixturevalue("bucket")
    return open_store(f"s3://{bucket}/ci/pool")


@pytest.fixture
def child_env(kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if kind == "s3":
        env.update(request.getfixturevalue("s3_env"))
    env["PYTHONPATH"] = str(REPO)
    return env


# ------------------------------------------------------------------------------ round trips


def test_round_trip(store: RecordStore) -> None:
    key = "pools/gpu/pool.json"
    assert store.read(key) is None
    etag = store.create(key, {"size": 2, "boxes": {}})
    assert store.read(key) == Versioned({"size": 2, "boxes": {}}, etag)

    etag2 = store.replace(key, {"size": 3, "boxes": {"b1": None}}, etag)
    assert etag2 != etag
    assert store.read(key) == Versioned({"size": 3, "boxes": {"b1": None}}, etag2)

    store.create("pools/gpu/boxes/b2.json", {"n": 2})
    store.create("pools/gpu/boxes/b1.json", {"n": 1})
    store.create("pools/cpu/pool.json", {})
    assert store.list("pools/gpu/") == [
        "pools/gpu/boxes/b1.json",
        "pools/gpu/boxes/b2.json",
        "pools/gpu/pool.json",
    ]
    assert store.list("pools/gpu/boxes/") == ["pools/gpu/boxes/b1.json", "pools/gpu/boxes/b2.json"]
    assert store.list("") == ["pools/cpu/pool.json", *store.list("pools/gpu/")]
    assert store.list("pools/none/") == []

    store.delete(key)
    assert store.read(key) is None
    store.delete(key)  # absent is fine
    assert key not in store.list("pools/")
    store.create(key, {"again": True})  # a deleted key can be created again


def test_conflicts(store: RecordStore) -> None:
    key = "pools/gpu/pool.json"
    first = store.create(key, {"v": 1})
    with pytest.raises(Conflict):
        store.create(key, {"v": "other"})
    second = store.replace(key, {"v": 2}, first)
    with pytest.raises(Conflict):
        store.replace(key, {"v": "stale"}, first)
    assert store.read(key) == Versioned({"v": 2}, second)

    store.delete(key)
    with pytest.raises(Conflict):
        store.replace(key, {"v": "ghost"}, second)
    assert store.read(key) is None
    with pytest.raises(Conflict):
        store.replace("pools/never/written.json", {}, second)


def test_concurrent_create_has_one_winner(store: RecordStore) -> None:
    winners: list[int] = []
    barrier = threading.Barrier(PROCESSES)

    def attempt(me: int) -> None:
        barrier.wait()
        try:
            store.create("pools/gpu/lease.json", {"owner": me})
        except Conflict:
            return
        winners.append(me)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(PROCESSES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
    stored = store.read("pools/gpu/lease.json")
    assert stored is not None and stored.data == {"owner": winners[0]}


# ------------------------------------------------------------------------------ update


def test_update(store: RecordStore) -> None:
    key = "pools/gpu/pool.json"
    with pytest.raises(OrchError, match="no such record pools/gpu/pool.json"):
        update(store, key, lambda data: None)
    etag = store.create(key, {"count": 1})

    def bump(data: dict[str, Any]) -> int:
        data["count"] += 1
        return data["count"]

    assert update(store, key, bump) == ({"count": 2}, 2)
    stored = store.read(key)
    assert stored is not None and stored.data == {"count": 2} and stored.etag != etag

    # A change that changes nothing writes nothing.
    assert update(store, key, lambda data: "same") == ({"count": 2}, "same")
    assert store.read(key) == stored


def test_update_gives_up_naming_the_key(tmp_path: Path) -> None:
    class Busy(LocalStore):
        def replace(self, key: str, data: dict[str, Any], etag: str) -> str:
            super().replace(key, {**data, "other": uuid.uuid4().hex}, etag)  # another writer
            raise Conflict("changed")

    busy = Busy(tmp_path / "pools")
    busy.create("pools/gpu/pool.json", {"count": 0})
    calls = []
    with pytest.raises(OrchError, match="pools/gpu/pool.json.*3 attempts") as caught:
        update(
            busy,
            "pools/gpu/pool.json",
            lambda data: calls.append(data.update(count=data["count"] + 1)),
            attempts=3,
        )
    assert not isinstance(caught.value, Conflict)
    assert len(calls) == 3


# ------------------------------------------------------------------------------ processes

# One launcher process imports everything (and loads boto3's S3 model) once, then forks the
# racers: separate processes, without 20 interpreters importing boto3 on two cores. The
# launcher is single-threaded, so forking it is safe. Each racer makes its own store (and S3
# client), says it is ready, and waits for the common start.
RACE = r"""
import json, os, sys, traceback
from pathlib import Path
from orchestrator.pool.store import LocalStore, open_store, update

where, mode, key, processes, increments = sys.argv[1:]
if where.startswith("s3://"):
    import boto3

    boto3.client("s3", region_name="us-east-1")  # parse the service model before forking


def bump(data):
    data["count"] += 1


def race(me):
    store = open_store(where) if where.startswith("s3://") else LocalStore(Path(where))
    store.read(key)  # connected before the start
    os.write(ready_w, b"r")
    os.read(go_r, 1)
    if mode == "count":
        for _ in range(int(increments)):
            update(store, key, bump)
        return {"me": me}

    def take(data):
        for slot, owner in sorted(data["slots"].items()):
            if owner is None:
                data["slots"][slot] = me
                return slot
        return None

    _, slot = update(store, key, take)
    return {"me": me, "slot": slot}


ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
children = {}
for n in range(int(processes)):
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(out_w, json.dumps(race(f"p{n}")).encode())
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(out_w)
    children[pid] = out_r
got = 0
while got < len(children):
    chunk = os.read(ready_r, len(children) - got)
    if not chunk:
        break
    got += len(chunk)
os.write(go_w, b"g" * len(children))
results, failed = [], 0
for pid, out_r in children.items():
    with os.fdopen(out_r, "rb") as pipe:
        body = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        failed += 1
    else:
        results.append(json.loads(body))
print(json.dumps(results))
sys.exit(1 if failed else 0)
"""


def race(store: RecordStore, mode: str, key: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """PROCESSES processes, started at once, each running `mode` on `key`: what each returned."""
    argv = [sys.executable, "-c", RACE, store.url, mode, key, str(PROCESSES), str(INCREMENTS)]
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_concurrent_counter_from_processes(store: RecordStore, child_env: dict[str, str]) -> None:
    key = "pools/gpu/counter.json"
    store.create(key, {"count": 0})
    results = race(store, "count", key, child_env)
    assert len(results) == PROCESSES
    stored = store.read(key)
    assert stored is not None and stored.data == {"count": PROCESSES * INCREMENTS}


def test_concurrent_slots_from_processes(store: RecordStore, child_env: dict[str, str]) -> None:
    key = "pools/gpu/slots.json"
    store.create(key, {"slots": {f"s{n}": None for n in range(SLOTS)}})
    results = race(store, "slot", key, child_env)
    winners = {r["me"]: r["slot"] for r in results if r["slot"] is not None}
    assert len(winners) == SLOTS
    assert sorted(winners.values()) == [f"s{n}" for n in range(SLOTS)]
    stored = store.read(key)
    assert stored is not None
    assert stored.data["slots"] == {slot: me for me, slot in winners.items()}


# ------------------------------------------------------------------------------ keys, secrets


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/pools/a.json",
        "../a.json",
        "pools/../../a.json",
        "pools/..",
        "pools//a.json",
        "pools/a.json/",
        "pools/.hidden",
        ".locks/x.lock",
        "pools/a..b.json",
        "pools/a b.json",
        "pools/ü.json",
        "pools\\a.json",
        "a" * 600,
    ],
)
def test_bad_keys(key: str, tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "pools")
    for call in (
        lambda: local.read(key),
        lambda: local.create(key, {}),
        lambda: local.replace(key, {}, "x"),
        lambda: local.delete(key),
        lambda: local.put_secret(key, "x"),
        lambda: local.get_secret(key),
    ):
        with pytest.raises(UsageError, match="bad pool store key"):
            call()
    s3 = S3Store("bucket-never-reached", "p")  # validated before any request
    with pytest.raises(UsageError):
        s3.read(key)
    assert list(tmp_path.rglob("*.json")) == []


@pytest.mark.parametrize("prefix", ["/", "../", "a/../", "a//", "a b"])
def test_bad_list_prefixes(prefix: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="bad pool store prefix"):
        LocalStore(tmp_path / "pools").list(prefix)


def test_secrets(store: RecordStore, kind: str, request: pytest.FixtureRequest) -> None:
    key = "pools/gpu/boxes/b1/id_ed25519"
    assert store.get_secret(key) is None
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
    store.put_secret(key, pem)
    assert store.get_secret(key) == pem
    store.put_secret(key, pem + "x")
    assert store.get_secret(key) == pem + "x"
    if kind == "local":
        assert isinstance(store, LocalStore)
        assert stat.S_IMODE(os.stat(store.root / key).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(store.root / "pools/gpu/boxes/b1").st_mode) == 0o700
        leftovers = [
            p for p in store.root.rglob(".*") if p.name != ".locks" and p.suffix != ".lock"
        ]
        assert leftovers == []  # no temporary files
    else:
        client = request.getfixturevalue("s3_client")
        assert isinstance(store, S3Store)
        head = client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/{key}")
        assert head["ServerSideEncryption"] == "AES256"
        store.create("pools/gpu/pool.json", {})
        head = client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/pools/gpu/pool.json")
        assert head["ServerSideEncryption"] == "AES256"
        assert head["ContentType"] == "application/json"
    store.delete(key)
    assert store.get_secret(key) is None


def test_local_records_are_private(tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "pools")
    local.create("pools/gpu/pool.json", {"a": 1})
    path = local.root / "pools/gpu/pool.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {"a": 1}
    path.write_text("[1, 2]")
    with pytest.raises(OrchError, match="not a JSON object"):
        local.read("pools/gpu/pool.json")


# ------------------------------------------------------------------------------ S3 specifics


def test_open_store(tmp_path: Path) -> None:
    from orchestrator.provision.boxes import orch_home

    local = open_store(None)
    assert isinstance(local, LocalStore) and local.root == orch_home() / "pools"
    s3 = open_store("s3://my-bucket/ci/pools/")
    assert isinstance(s3, S3Store) and s3.url == "s3://my-bucket/ci/pools"
    assert open_store("s3://my-bucket").url == "s3://my-bucket"
    for bad in ("http://my-bucket/x", "s3://My_Bucket/x", "s3://my-bucket/a b", str(tmp_path)):
        with pytest.raises(UsageError, match="bad pool store"):
            open_store(bad)


def test_s3_list_stays_under_the_prefix(bucket: str, s3_client) -> None:  # noqa: ANN001
    s3_client.put_object(Bucket=bucket, Key="ci/poolside/x.json", Body=b"{}")
    s3_client.put_object(Bucket=bucket, Key="other/pools/gpu/pool.json", Body=b"{}")
    store = open_store(f"s3://{bucket}/ci/pool")
    store.create("pools/gpu/pool.json", {})
    assert store.list("") == ["pools/gpu/pool.json"]
    root = open_store(f"s3://{bucket}")
    assert root.list("ci/") == ["ci/pool/pools/gpu/pool.json", "ci/poolside/x.json"]


def test_s3_missing_bucket_is_a_usage_error(s3_env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        open_store("s3://no-such-pool-bucket/x").read("pools/a.json")


def test_s3_access_denied_names_the_permission(bucket: str) -> None:
    from botocore.exceptions import ClientError

    store = open_store(f"s3://{bucket}/ci")
    assert isinstance(store, S3Store)

    class Denied:
        def __getattr__(self, name: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, name)

            return call

    store._client = Denied()
    for call, permission in (
        (lambda: store.read("a.json"), "s3:GetObject"),
        (lambda: store.create("a.json", {}), "s3:PutObject"),
        (lambda: store.replace("a.json", {}, '"x"'), "s3:PutObject"),
        (lambda: store.delete("a.json"), "s3:DeleteObject"),
        (lambda: store.list(""), "s3:ListBucket"),
        (lambda: store.put_secret("a.key", "x"), "s3:PutObject"),
    ):
        with pytest.raises(UsageError, match=f"{permission} is denied"):
            call()


def test_s3_retried_create_that_landed_is_not_a_conflict(bucket: str) -> None:
    """botocore retries a PUT whose answer was lost; the retry then fails If-None-Match
    against our own first attempt. The store sees its write id on the object: success."""
    from botocore.exceptions import ClientError

    store = open_store(f"s3://{bucket}/ci")
    assert isinstance(store, S3Store)
    real = store._s3()

    class AnswerLost:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def put_object(self, **kwargs: Any) -> Any:
            real.put_object(**kwargs)  # lands, but the answer never arrives
            try:
                return real.put_object(**kwargs)  # the SDK's retry
            except ClientError as exc:
                exc.response["ResponseMetadata"]["RetryAttempts"] = 1
                raise

    store._client = AnswerLost()
    etag = store.create("pools/gpu/pool.json", {"v": 1})
    assert store.read("pools/gpu/pool.json") == Versioned({"v": 1}, etag)
    store._client = real
    with pytest.raises(Conflict):  # someone else's create is still a conflict
        store.create("pools/gpu/pool.json", {"v": 2})


def test_backoff_bounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(store_module.time, "sleep", sleeps.append)

    class Busy(LocalStore):
        def replace(self, key: str, data: dict[str, Any], etag: str) -> str:
            raise Conflict("changed")

    busy = Busy(tmp_path / "pools")
    busy.create("k.json", {"n": 0})
    with pytest.raises(OrchError):
        update(busy, "k.json", lambda data: data.update(n=1), attempts=12)
    assert len(sleeps) == 12
    assert all(0.01 <= s <= 0.5 for s in sleeps)
    assert sleeps[0] == pytest.approx(0.01)


def test_proxy_serializes_writes_of_one_object(bucket: str, s3_proxy: CapacityProxy) -> None:
    """The proxy forwards a write of an object only while holding that object's lock (what
    makes moto's check-then-write atomic); reads and other objects go straight through."""
    store = open_store(f"s3://{bucket}/ci")
    etag = store.create("pools/a.json", {"v": 1})
    host = s3_proxy.url.removeprefix("http://")
    lock = s3_proxy.object_lock("PUT", f"/{bucket}/ci/pools/a.json", {"Host": host})
    assert lock is s3_proxy.object_lock("DELETE", f"/{bucket}/ci/pools/a.json?x=1", {"Host": host})
    done: list[str] = []
    with lock:
        writer = threading.Thread(
            target=lambda: done.append(store.replace("pools/a.json", {}, etag))
        )
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and not done  # waits for the object's lock
        assert store.read("pools/a.json") == Versioned({"v": 1}, etag)  # reads do not
        store.create("pools/b.json", {})  # nor writes of other objects
    writer.join(120)  # a bound on a hang: it ends once the write is done
    assert done and store.read("pools/a.json") == Versioned({}, done[0])
