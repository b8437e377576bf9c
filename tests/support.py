"""Helpers shared by the test suites."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan import Candidate, Plan, write_plan


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: object, what: str) -> None:
    """Skip a test whose prerequisite is missing, but fail it in CI (CI=true).

    End-to-end tests must never pass silently in CI because moto, the provider mirror or
    sshd went missing. Callable in a test, a fixture, or at module level (as `require_module`
    is): locally a module-level call skips that module only, not the whole session.
    """
    if condition:
        return
    message = f"prerequisite missing: {what}"
    if in_ci():
        pytest.fail(message + " (CI=true: end-to-end prerequisites are mandatory)")
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, what: str | None = None):  # noqa: ANN201 - the module
    """Import a test dependency; skip locally without it, fail in CI (like `require`)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        require(False, what or f"Python module {name} (pip install -e '.[test]')")


# GPUs of the instance types the tests use, as the catalog lists them: (GPU, count, GiB each).
GPUS_OF_TYPE: dict[str, tuple[str, int, float]] = {
    "g5.xlarge": ("A10G", 1, 24.0),
    "g4dn.xlarge": ("T4", 1, 16.0),
    "p4d.24xlarge": ("A100", 8, 40.0),
    "ecs.gn6i-c4g1.xlarge": ("T4", 1, 16.0),
    "ecs.gn7i-c8g1.2xlarge": ("A10", 1, 24.0),
}
# Per cloud: where the box is, what it boots and who logs in.
CLOUD_DEFAULTS: dict[str, dict[str, Any]] = {
    "aws": dict(
        region="us-east-1",
        instance_type="g5.xlarge",
        image={"ssm_parameter": "/aws/service/x"},
        root_volume_gib=150,
        ssh_user="ubuntu",
        price_per_hour=1.006,
        samples_per_s=12.5,
        hours=2.0,
        cost=2.01,
        memory_per_gpu_bytes=10 * 2**30,
        memory_fraction=0.42,
    ),
    "aliyun": dict(
        region="cn-hangzhou",
        instance_type="ecs.gn6i-c4g1.xlarge",
        image={"name_regex": "^ubuntu_22_04_x64", "owners": "system"},
        root_volume_gib=90,
        ssh_user="root",
        price_per_hour=1.185,
        samples_per_s=12.9,
        hours=2.3,
        cost=2.74,
        memory_per_gpu_bytes=1,
        memory_fraction=0.73,
    ),
}


def candidate(
    instance_type: str | None = None,
    market: str = "on-demand",
    *,
    cloud: str | None = None,
    **changes: Any,
) -> Candidate:
    """A plan row for tests: the cloud's defaults, the GPUs of `instance_type`, then `changes`.

    The cloud follows from the instance type (`ecs.*` is Aliyun) unless given.
    """
    if cloud is None:
        cloud = "aliyun" if (instance_type or "").startswith("ecs.") else "aws"
    values: dict[str, Any] = dict(CLOUD_DEFAULTS[cloud], cloud=cloud, market=market)
    if instance_type is not None:
        values["instance_type"] = instance_type
    gpu, count, memory = GPUS_OF_TYPE.get(values["instance_type"], ("A10G", 1, 24.0))
    values.update(gpu=gpu, gpu_count=count, gpu_memory_gib=memory)
    values.update(changes)
    return Candidate(**values)


def plan_file(tmp_path: Path, *candidates: Candidate) -> str:
    """Write a plan.json whose choice and alternatives are `candidates`, in order."""
    plan = Plan(
        job={"model": "bert-large"},
        estimate={},
        choice=candidates[0],
        alternatives=list(candidates[1:]),
        created_at="2026-12-02T19:00:00Z",
    )
    return str(write_plan(plan, tmp_path / "plan.json"))


def reset_moto(url: str) -> None:
    """Forget every resource the moto server at `url` holds (its /moto-api/reset)."""
    import urllib.request

    reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    # A bound on a hang only. Resetting a server whose EC2 and S3 were used takes 1.1 s here
    # alone but 11 to 17 s with 16 CPU burners on 2 cores (the bound was 10 s).
    urllib.request.urlopen(reset, timeout=120).close()


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Assert a command succeeded, showing its stderr when it did not."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    return result


def failed_line(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """Assert a command failed with exit `code` and ended on one `orch: error: ...` line;
    return that line."""
    assert result.returncode == code, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("orch: error: "), result.stderr[-3000:]
    return line


# An RSA public key (ssh-rsa): what Alibaba Cloud's ImportKeyPair accepts (no ed25519), for
# tests that import a key into the Aliyun emulator. The private half was never kept.
ALIYUN_PUBLIC_KEY = (
    "ssh-rsa "
    "AAAAB3NzaC1yc2EAAAADAQABAAABAQCibM3I40ep4w+rpOUePOmJJK8Lsgh3zdEaG3xEr6N9K2itTypodEB61wm6"
    "cjmpPvB5XWc8lkasKn4nhM9FjDfzOBs5Glwa9vdKxob2XiermPUh2O9Mtkjg4KWdbPwbLoxZCyD7odwo9+yj6Jq4"
    "ZRy2uZ3cc6/5OyR93OscA14TS4ME8dtZh2NKWs5TAUcfsJ3TvFCH1D/JCSJyalGfcBhw3/GCc6cXxg7e3IFJ9sLG"
    "atTAn4tD/ZJhTaP07I1tH5gfW6h+R3wvMXgX2zUky8T2B+bvIQ6NKzgEhpEAzrVlM8x4asZ3c8L5W8fwJYMI0sYs"
    "SAOyS4QJlm4JdnJ2VyxH"
    " orch-test"
)


def with_cloud_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials every built-in cloud's chain finds (moto's and the emulator's values), so
    that `orch up`/`run`'s preflight lets a test reach the code it is about."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "testing",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "testing",
    }.items():
        monkeypatch.setenv(key, value)


class Tripwire(AssertionError):
    """Raised by a stand-in where the code under test must not (or need not) go further."""


def forbid_cloud_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make rendering, Terraform and the caller-address lookup of `orch up` raise Tripwire: a
    test of what is refused before any cloud or Terraform call fails if the call happens."""
    from orchestrator.provision import inputs, launch, steps

    def tripwire(*_args: Any, **_kwargs: Any) -> None:
        raise Tripwire("reached the cloud")

    monkeypatch.setattr(launch, "render_box", tripwire)
    monkeypatch.setattr(steps, "terraform_for", tripwire)
    monkeypatch.setattr(inputs, "discover_caller_cidr", tripwire)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`orch ARGV` in this process: its exit code, stdout and stderr."""
    from orchestrator.cli import main

    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_refused(capsys: pytest.CaptureFixture[str], *argv: str, words: tuple[str, ...] = ()) -> str:
    """`orch ARGV` is refused as bad input: exit 2 and one line `orch: error: ...` that holds
    every one of `words`, never a traceback. Returns the line (the up/run/pool validation
    suites share this one check)."""
    code, _, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def end_runs_under(home: Path) -> None:
    """KILL whatever the detached runs under `home` (a box home's .orch/runs/RUN_ID) left
    running: a test that fails before it stops its job would otherwise leave the wrapper, its
    job and the checkpoint agent running after the suite. A process is theirs when its command
    line names its run folder (unique temporary paths); a wrapper, which leads its process
    group, takes its whole group (the job's commands name no run folder)."""
    runs = [str(folder) for folder in home.glob(".orch/runs/*") if folder.is_dir()]
    if not runs:
        return
    theirs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
            if any(run in command for run in runs):
                theirs.append(int(entry.name))
    for pid in theirs:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
