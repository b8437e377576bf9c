"""orch.yaml's values that only the flags' own checks used to see: box.name, box.ssh_cidr,
box.state, box.subnet_id, checkpoint.store, pool.store (and pool.name, checkpoint.dir,
run.fetch, run.exclude). A bad value in the file was refused with the flag's words
(`bad --ssh-cidr 'x'`, `--store 'gs://b' is not s3://...`) or none (`bad box name 'X'`), never
the file and line, and `orch plan` took it. The loader now applies the same validators and
names `orch.yaml:LINE: key`; a value the flag takes is still taken from the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clouds import registry
from orchestrator.errors import UsageError
from orchestrator.jobfile.load import read_job_file
from orchestrator.provision import inputs
from orchestrator.run import session
from tests.support import Tripwire, forbid_cloud_reach, run_cli

REPO = Path(__file__).resolve().parents[2]
CIDR = "203.0.113.7/32"
HEAD = "model: bert-large\n"


def loaded(here: Path, text: str) -> Any:
    (here / "orch.yaml").write_text(HEAD + text)
    return read_job_file("orch.yaml")


def refusal(here: Path, text: str) -> str:
    with pytest.raises(UsageError) as caught:
        loaded(here, text)
    assert caught.value.exit_code == 2
    line = caught.value.one_line()
    assert "\n" not in line
    return line


# (the file's text after `model:`, the start of the one line: file, line, key, reason)
BAD = [
    ("box:\n  name: Bad_Name\n", "orch.yaml:3: box.name: bad box name 'Bad_Name' (start with"),
    ("box:\n  name: a.b\n", "orch.yaml:3: box.name: bad box name 'a.b'"),
    (
        "box:\n  ssh_cidr:\n    - 203.0.113.7/32\n    - not-a-cidr\n",
        "orch.yaml:5: box.ssh_cidr[1]: bad 'not-a-cidr': expected e.g. 203.0.113.7/32",
    ),
    (
        "box:\n  ssh_cidr: [2001:db8::/32]\n",
        "orch.yaml:3: box.ssh_cidr[0]: '2001:db8::/32' is IPv6; give an IPv4 block",
    ),
    (
        "box:\n  state: s3://Bad_Bucket/orch\n",
        "orch.yaml:3: box.state: bad 's3://Bad_Bucket/orch': expected s3://bucket/prefix",
    ),
    ("box:\n  state: s3://bkt/a b\n", "orch.yaml:3: box.state: bad 's3://bkt/a b': the prefix"),
    (
        "box:\n  subnet_id: nope\n",
        "orch.yaml:3: box.subnet_id: 'nope' is not a subnet id (expected e.g. subnet-",
    ),
    (
        "checkpoint:\n  dir: ck\n  store: gs://bkt/ck\n",
        "orch.yaml:4: checkpoint.store: 'gs://bkt/ck' is not s3://bucket[/prefix]",
    ),
    (
        "checkpoint:\n  dir: ck\n  store: s3://bkt/a//b\n",
        "orch.yaml:4: checkpoint.store: 's3://bkt/a//b': the prefix has an empty",
    ),
    (
        "pool:\n  name: gpu\n  store: s3://B\n",
        "orch.yaml:4: pool.store: bad pool store 's3://B': expected s3://bucket/prefix",
    ),
    ("pool:\n  name: GPU_1\n", "orch.yaml:3: pool.name: bad pool name 'GPU_1' (a lower-case"),
    (
        "checkpoint:\n  dir: /abs\n  store: s3://bkt/ck\n",
        "orch.yaml:3: checkpoint.dir: '/abs' must be relative to the working directory",
    ),
    (
        "run:\n  fetch:\n    - outputs\n    - ../up\n",
        "orch.yaml:5: run.fetch[1]: '../up' must be relative to the working directory",
    ),
    ("run:\n  fetch: ['.']\n", "orch.yaml:3: run.fetch[0]: '.' names the whole working"),
    ('run:\n  exclude: ["a\\nb"]\n', "orch.yaml:3: run.exclude[0]: 'a\\nb' is not a pattern"),
    (
        "run:\n  fetch: [" + ", ".join(f"f{i}" for i in range(51)) + "]\n",
        "orch.yaml:3: run.fetch: more than 50 entries",
    ),
]


@pytest.mark.parametrize(("text", "start"), BAD)
def test_the_loader_refuses_what_the_flag_refuses_with_file_line_and_key(here, text, start):
    line = refusal(here, text)
    assert line.startswith(start), line
    assert not any(flag in line.split(" (")[0] for flag in ("--ssh-cidr", "--state", "--store"))


@pytest.mark.parametrize(("text", "start"), BAD)
def test_plan_up_and_run_refuse_it_before_any_cloud_call(here, capsys, monkeypatch, text, start):
    forbid_cloud_reach(monkeypatch)
    monkeypatch.setattr(session, "Run", _tripwire)
    (here / "orch.yaml").write_text(HEAD + text)
    argvs = (["plan"], ["up", "--name", "x", "--yes"], ["run", "--yes", "--", "true"])
    for argv in argvs:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err == f"orch: error: {refusal(here, text)}\n", (argv, err)
        assert err.startswith(f"orch: error: {start}")
    assert not (here / "home" / "boxes").exists()


def _tripwire(*_args: Any, **_kwargs: Any) -> None:
    raise Tripwire("reached the run")


def test_a_subprocess_run_gets_one_line_and_exit_2(here):
    (here / "orch.yaml").write_text(HEAD + "box:\n  ttl: 2h\n  ssh_cidr: [10.0.0.0/33]\n")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "--yes", "--", "true"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == (
        "orch: error: orch.yaml:4: box.ssh_cidr[0]: bad '10.0.0.0/33':"
        " expected e.g. 203.0.113.7/32\n"
    )


GOOD = """\
box:
  name: exp-1
  ssh_cidr: [203.0.113.7/32, 198.51.100.0/24]
  state: s3://my-bucket/orch/state
  subnet_id: subnet-0123456789abcdef0
run:
  fetch: [outputs, logs/run.txt]
  exclude: [data/, "*.ckpt"]
checkpoint:
  dir: ck/latest
  store: s3://bkt/ckpt/run
"""


def test_values_the_flags_take_are_taken_from_the_file(here, capsys, monkeypatch):
    job = loaded(here, GOOD + "pool:\n  name: gpu-a\n  store: s3://my-bucket/pools\n")
    assert job.data["box"]["subnet_id"] == "subnet-0123456789abcdef0"
    seen: list[Any] = []
    monkeypatch.setattr(session, "Run", lambda request, *_: (seen.append(request), _tripwire()))
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    # A subnet is in one region: the plan's too (test_up_subnet.py).
    (here / "orch.yaml").write_text(HEAD + "resources:\n  region: us-east-1\n" + GOOD)
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes", "--", "true")
    request = seen[0]
    assert request.box_name == "exp-1"
    assert request.up_options.subnet_id == "subnet-0123456789abcdef0"
    assert request.up_options.ssh_cidrs == [CIDR, "198.51.100.0/24"]
    assert request.up_options.state_url == "s3://my-bucket/orch/state"
    assert request.spec.store is not None and request.spec.store.url == "s3://bkt/ckpt/run"
    assert request.spec.checkpoint_dir == "ck/latest"
    assert request.spec.fetch == ["outputs", "logs/run.txt"]
    assert request.spec.excludes == ["data/", "*.ckpt"]


WORLD = "box:\n  ttl: 2h\n  ssh_cidr: [0.0.0.0/1, 128.0.0.0/1]\n"


def test_a_world_wide_file_block_names_its_line_unless_allowed(here, capsys, monkeypatch):
    """The blocks are judged together, and --allow-world-ssh on the command line allows what
    the file asks for: that rule runs once the typed flags are known, not at loading."""
    forbid_cloud_reach(monkeypatch)
    seen: list[Any] = []
    monkeypatch.setattr(session, "Run", lambda request, *_: (seen.append(request), _tripwire()))
    (here / "orch.yaml").write_text(HEAD + WORLD)
    for argv in (["up", "--name", "x", "--yes"], ["run", "--yes", "--", "true"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, err
        assert err.startswith(
            "orch: error: orch.yaml:4: box.ssh_cidr: blocks together open SSH to 4,294,967,296"
        ), err
        assert len(err.splitlines()) == 1
    assert run_cli(capsys, "plan")[0] == 0  # plan opens no SSH
    (here / "orch.yaml").write_text(HEAD + "box:\n  ssh_cidr:\n    - 0.0.0.0/0\n")
    code, _, err = run_cli(capsys, "up", "--name", "x", "--yes")
    assert code == 2 and err == (
        "orch: error: orch.yaml:3: box.ssh_cidr: 0.0.0.0/0 opens SSH to the whole internet"
        " (add --allow-world-ssh if you really mean it)\n"
    )
    (here / "orch.yaml").write_text(HEAD + WORLD)
    with pytest.raises(Tripwire):  # the flag allows the file's blocks
        run_cli(capsys, "run", "--yes", "--allow-world-ssh", "--", "true")
    (here / "orch.yaml").write_text(HEAD + WORLD + "  allow_world_ssh: true\n")
    with pytest.raises(Tripwire):  # so does the file
        run_cli(capsys, "run", "--yes", "--", "true")
    assert [r.up_options.ssh_cidrs for r in seen] == [["0.0.0.0/1", "128.0.0.0/1"]] * 2
    # --ssh-cidr replaces the file's blocks: they are not judged.
    (here / "orch.yaml").write_text(HEAD + WORLD)
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes", "--ssh-cidr", CIDR, "--", "true")
    assert seen[-1].up_options.ssh_cidrs == [CIDR]


def test_a_subnet_id_is_refused_only_when_no_cloud_takes_it(here, monkeypatch):
    """The subnet's rule is its cloud's (AWS: subnet- and hex; Aliyun: none yet), and the
    plan picks the cloud after loading: the file's id is refused when every registered cloud
    refuses it, and a cloud that cannot tell (a plugin without check_subnet_id) takes it."""
    assert registry.subnet_id_refusal("subnet-0123456789abcdef0") is None
    refused = registry.subnet_id_refusal("projects/p/regions/r/subnetworks/s")
    assert refused is not None and "is not a subnet id" in refused.message

    class Plugin:
        name = "plugin"

    registry.register("plugin", Plugin())
    try:
        assert registry.subnet_id_refusal("projects/p/regions/r/subnetworks/s") is None
        assert loaded(here, "box:\n  subnet_id: projects/p/regions/r/subnetworks/s\n")
    finally:
        registry.unregister("plugin")


def test_an_unknown_model_names_its_line_and_a_known_one_in_any_spelling_loads(here, capsys):
    """`model:` was checked only when the plan was made: `unknown model 'bert-lage'`, without
    the file or line (and `up --plan`, `run --box` never saw it)."""
    (here / "orch.yaml").write_text("job:\n  epochs: 1\nmodel: bert-lage\n")
    for argv in (["plan"], ["up", "--name", "x", "--yes"], ["run", "--yes", "--", "true"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(
            "orch: error: orch.yaml:3: model: unknown model 'bert-lage' (did you mean bert-large"
        ), err
    for name in ("BERT-LARGE", "google-bert/bert-large-uncased", "meta-llama/Llama-2-7b-hf"):
        (here / "orch.yaml").write_text(f"model: {name}\n")
        assert read_job_file("orch.yaml").data["model"] == name


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("resources:\n  gpu: Z9000\n", "orch.yaml:3: resources.gpu: unknown GPU 'Z9000' (known:"),
        (
            "resources:\n  throughput:\n    A10G: 12.5\n    Z9000: 10\n",
            "orch.yaml:5: resources.throughput.Z9000: unknown GPU 'Z9000' (known:",
        ),
    ],
)
def test_gpu_names_are_the_catalog_s_and_name_their_line(here, capsys, text, start):
    """resources.gpu and throughput's GPU names were `--gpu: unknown GPU 'Z9000'`, naming a
    flag the user did not type and neither file nor line."""
    assert refusal(here, text).startswith(start)
    code, _, err = run_cli(capsys, "plan")
    assert code == 2 and err.startswith(f"orch: error: {start}") and len(err.splitlines()) == 1


def test_gpu_names_the_flags_take_load_from_the_file(here):
    job = loaded(here, "resources:\n  gpu: h100\n  throughput: {a10g: 12.5, H100: 30}\n")
    assert job.data["resources"]["gpu"] == "h100"
