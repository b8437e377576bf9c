"""scripts/install_drivers.sh, run by bash against a temporary root with stub commands.

Only the stubs and a short list of harmless tools (date, grep, cat, ...) are on PATH, so the
script can never reach the real package manager or systemd of the machine running the tests.
Each stub appends its argv to a log; the tests assert what the script asked for.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.provision.userdata import USER_DATA_LIMIT, render_user_data
from orchestrator.resources import resource_path
from tests.support import require

SCRIPT = resource_path("scripts/install_drivers.sh")
BASH = shutil.which("bash")
TOOLS = ("bash", "sh", "date", "mkdir", "cat", "rm", "mv", "head", "grep", "chmod", "touch")
FUTURE = "2031-03-04T05:06:07Z"

OS_RELEASES = {
    "ubuntu-22.04": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n',
    "ubuntu-24.04": 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n',
    "al2023": 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\n'
    'VERSION_ID="2023"\n',
    "alinux3": 'NAME="Alibaba Cloud Linux"\nVERSION="3 (OpenAnolis Edition)"\nID="alinux"\n'
    'ID_LIKE="rhel fedora centos anolis"\nVERSION_ID="3"\n',
    "debian-12": 'NAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n',
}
# `lspci -nn -d 10de:` lines in the real format: a T4, and an NVSwitch bridge of an HGX board.
LSPCI_T4 = (
    "00:1e.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)"
)
LSPCI_NVSWITCH = "c5:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)"

NVIDIA_SMI = """#!/bin/bash
echo "nvidia-smi $*" >>"$STUB_LOG"
case "$1" in
  -L) echo "GPU 0: Tesla T4 (UUID: GPU-d37e67a5-91dd-3774-a5cb-99096249601a)" ;;
  --query-gpu=driver_version) echo "515.105.01" ;;
esac
"""

# A package manager stub: logs, optionally fails, and "installs" nvidia-smi with the driver.
PACKAGE_MANAGER = """#!/bin/bash
echo "{name} $*" >>"$STUB_LOG"
if [[ "${{STUB_FAIL:-}}" == "{name}" && "$*" == *install* ]]; then exit 100; fi
if [[ "$*" == *{driver_package}* ]]; then
  cat >"$STUB_BIN/nvidia-smi" <"$STUB_BIN/.nvidia-smi"
  chmod +x "$STUB_BIN/nvidia-smi"
fi
"""

LOGGING_STUB = '#!/bin/bash\necho "{name} $*" >>"$STUB_LOG"\n'


class Sandbox:
    def __init__(self, base: Path, os_name: str, *, lspci: list[str] | None, driver: bool):
        self.root = base / "root"
        self.bin = base / "bin"
        self.tools = base / "tools"
        self.log = base / "stub.log"
        for folder in (self.root / "etc", self.bin, self.tools):
            folder.mkdir(parents=True)
        (self.root / "etc" / "os-release").write_text(OS_RELEASES[os_name])
        for tool in TOOLS:
            found = shutil.which(tool)
            assert found, f"{tool} missing on the test machine"
            (self.tools / tool).symlink_to(found)
        self._stub(
            "apt-get", PACKAGE_MANAGER.format(name="apt-get", driver_package="nvidia-driver-")
        )
        self._stub("dnf", PACKAGE_MANAGER.format(name="dnf", driver_package="nvidia-driver:"))
        for name in ("systemctl", "modprobe"):
            self._stub(name, LOGGING_STUB.format(name=name))
        self._stub(
            "uname",
            LOGGING_STUB.format(name="uname")
            + 'if [ "$1" = -m ]; then echo x86_64; else echo 6.8.0-1015-aws; fi\n',
        )
        if lspci is not None:
            lines = "\n".join(lspci)
            self._stub("lspci", LOGGING_STUB.format(name="lspci") + f"cat <<'EOF'\n{lines}\nEOF\n")
        (self.bin / ".nvidia-smi").write_text(NVIDIA_SMI)
        if driver:
            self._stub("nvidia-smi", NVIDIA_SMI)

    def _stub(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def run(self, script: Path = SCRIPT, **env: str) -> subprocess.CompletedProcess:
        environment = {
            "PATH": f"{self.bin}:{self.tools}",
            "ORCH_ROOT": str(self.root),
            "STUB_LOG": str(self.log),
            "STUB_BIN": str(self.bin),
            **env,
        }
        return subprocess.run([BASH, str(script)], env=environment, capture_output=True, text=True)

    def calls(self, name: str | None = None) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if name is None or line.split()[0] == name]

    def file(self, relative: str) -> Path:
        return self.root / relative


@pytest.fixture
def sandbox(tmp_path):
    if BASH is None:
        pytest.fail("bash is required")

    def make(os_name: str, *, lspci: list[str] | None = None, driver: bool = False) -> Sandbox:
        return Sandbox(
            tmp_path, os_name, lspci=[LSPCI_T4] if lspci is None else lspci, driver=driver
        )

    return make


def install_lines(box: Sandbox, manager: str) -> list[str]:
    return [c for c in box.calls(manager) if " install" in c or " module install" in c]


# ---------------------------------------------------------------------------- OS branches


def test_ubuntu_2204_installs_server_driver_headers_and_toolkit(sandbox):
    box = sandbox("ubuntu-22.04")
    result = box.run(ORCH_EXPIRES_AT=FUTURE)
    assert result.returncode == 0, box.file("var/log/orch-install-drivers.log").read_text()
    assert box.calls("apt-get") == [
        "apt-get -y -q -o DPkg::Lock::Timeout=900 update",
        "apt-get -y -q -o DPkg::Lock::Timeout=900 install --no-install-recommends "
        "linux-headers-6.8.0-1015-aws nvidia-driver-570-server nvidia-cuda-toolkit",
    ]
    assert box.calls("dnf") == []
    assert box.calls("modprobe") == ["modprobe nvidia"]
    ready = box.file("var/lib/orch/ready").read_text()
    assert "driver=515.105.01" in ready and "gpus=1" in ready and "os=ubuntu 22.04" in ready
    assert not box.file("var/lib/orch/failed").exists()


def test_ubuntu_2404_with_nvidia_repo_and_nvswitch(sandbox):
    box = sandbox("ubuntu-24.04", lspci=[LSPCI_T4, LSPCI_T4, LSPCI_NVSWITCH])
    sources = box.file("etc/apt/sources.list.d")
    sources.mkdir(parents=True)
    (sources / "cuda-ubuntu2404-x86_64.list").write_text(
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /\n"
    )
    assert box.run(ORCH_DRIVER_BRANCH="550").returncode == 0
    (install,) = install_lines(box, "apt-get")
    assert install.endswith(
        "linux-headers-6.8.0-1015-aws nvidia-driver-550-server nvidia-fabricmanager-550 "
        "cuda-toolkit"
    )
    assert "systemctl enable --now nvidia-fabricmanager" in box.calls("systemctl")
    assert "gpus=2" in box.file("var/lib/orch/ready").read_text()  # the bridge is not a GPU


@pytest.mark.parametrize(("os_name", "repo"), [("al2023", "amzn2023"), ("alinux3", "rhel8")])
def test_dnf_systems_use_nvidia_repo_and_dkms_module(sandbox, os_name, repo):
    box = sandbox(os_name)
    assert box.run(ORCH_INSTALL_CUDA="1").returncode == 0
    k = "6.8.0-1015-aws"
    assert box.calls("dnf") == [
        f"dnf -y install kernel-devel-{k} kernel-headers-{k} kernel-modules-extra-{k} dkms",
        "dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/"
        f"repos/{repo}/x86_64/cuda-{repo}.repo",
        "dnf clean expire-cache",
        "dnf -y module install nvidia-driver:latest-dkms",
        "dnf -y install cuda-toolkit",
    ]
    assert box.calls("apt-get") == []
    assert box.file("var/lib/orch/ready").exists()


def test_toolkit_can_be_left_out(sandbox):
    box = sandbox("al2023")
    assert box.run(ORCH_INSTALL_CUDA="0").returncode == 0
    assert not any("cuda-toolkit" in c for c in box.calls("dnf"))


# ------------------------------------------------------------------- skip and idempotency


def test_preinstalled_driver_skips_the_install(sandbox):
    box = sandbox("ubuntu-22.04", driver=True)  # a Deep Learning AMI
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 0
    assert box.calls("apt-get") == [] and box.calls("modprobe") == []
    assert box.file("etc/systemd/system/orch-expire.timer").exists()
    assert "driver=515.105.01" in box.file("var/lib/orch/ready").read_text()


def test_second_run_does_nothing(sandbox):
    box = sandbox("ubuntu-22.04")
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 0
    ready = box.file("var/lib/orch/ready").read_text()
    calls_after_first = box.calls()
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 0
    assert box.calls() == calls_after_first  # not one command more
    assert box.file("var/lib/orch/ready").read_text() == ready
    assert "nothing to do" in box.file("var/log/orch-install-drivers.log").read_text()


# --------------------------------------------------------------------------------- expiry


def test_expiry_timer_and_service(sandbox):
    box = sandbox("ubuntu-22.04", driver=True)
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 0
    timer = box.file("etc/systemd/system/orch-expire.timer").read_text()
    assert "OnCalendar=2031-03-04 05:06:07 UTC\n" in timer
    assert "Persistent=true\n" in timer and "WantedBy=timers.target" in timer
    service = box.file("etc/systemd/system/orch-expire.service").read_text()
    epoch = int(datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp())
    # systemd turns $$ into $ and %% into %: the shell sees `$(date -u +%s)`.
    assert (
        f"""ExecStart=/bin/sh -c 'if [ "$$(date -u +%%s)" -ge {epoch} ]; """
        "then exec systemctl poweroff; fi'" in service
    )
    assert box.calls("systemctl") == [
        "systemctl daemon-reload",
        "systemctl enable --now orch-expire.timer",
    ]


def test_no_expiry_installs_no_timer(sandbox):
    box = sandbox("ubuntu-22.04", driver=True)
    assert box.run().returncode == 0
    assert not box.file("etc/systemd/system/orch-expire.timer").exists()
    assert box.calls("systemctl") == []


def test_expired_box_powers_off_at_once(sandbox):
    box = sandbox("ubuntu-22.04")
    past = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert box.run(ORCH_EXPIRES_AT=past).returncode == 0
    assert box.calls("systemctl")[-1] == "systemctl poweroff"
    assert box.calls("apt-get") == []


def test_malformed_expiry_is_refused(sandbox):
    box = sandbox("ubuntu-22.04", driver=True)
    result = box.run(ORCH_EXPIRES_AT="tomorrow; reboot")
    assert result.returncode == 1
    assert "not YYYY-MM-DDTHH:MM:SSZ" in box.file("var/lib/orch/failed").read_text()
    assert box.calls("systemctl") == []


# --------------------------------------------------------------------------------- failures


def test_unsupported_os_fails_but_still_expires(sandbox):
    box = sandbox("debian-12")
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 1
    assert "unsupported OS 'debian 12'" in box.file("var/lib/orch/failed").read_text()
    assert box.file("etc/systemd/system/orch-expire.timer").exists()  # expiry came first
    assert not box.file("var/lib/orch/ready").exists()


def test_no_gpu_on_the_bus_fails(sandbox):
    box = sandbox("ubuntu-22.04", lspci=[])
    assert box.run().returncode == 1
    assert "no NVIDIA GPU" in box.file("var/lib/orch/failed").read_text()
    assert box.calls("apt-get") == []


def test_gpu_found_through_sysfs_without_lspci(tmp_path):
    box = Sandbox(tmp_path, "al2023", lspci=None, driver=False)
    device = box.file("sys/bus/pci/devices/0000:00:1e.0")
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    assert box.run().returncode == 0
    assert "gpus=1" in box.file("var/lib/orch/ready").read_text()


def test_failed_package_install_leaves_a_failed_marker_and_a_rerun_retries(sandbox):
    box = sandbox("ubuntu-22.04")
    assert box.run(STUB_FAIL="apt-get").returncode != 0
    failed = box.file("var/lib/orch/failed").read_text()
    assert "apt-get -y -q -o DPkg::Lock::Timeout=900 install" in failed
    assert "failed (exit 100)" in failed
    assert box.run().returncode == 0  # e.g. after a reboot with the mirror back
    assert not box.file("var/lib/orch/failed").exists()
    assert box.file("var/lib/orch/ready").exists()


# ------------------------------------------------------------------------------- user data


def test_rendered_user_data_runs_like_the_script(sandbox, tmp_path):
    text = render_user_data("2031-03-04T07:06:07+02:00", "aws")
    assert text.startswith("#!/bin/bash\n")
    assert "ORCH_EXPIRES_AT='2031-03-04T05:06:07Z'" in text  # normalised to UTC
    assert "ORCH_CLOUD='aws'" in text
    assert len(text.encode()) < USER_DATA_LIMIT
    user_data = tmp_path / "user-data"
    user_data.write_text(text)
    box = sandbox("ubuntu-22.04", driver=True)
    assert box.run(script=user_data).returncode == 0
    timer = box.file("etc/systemd/system/orch-expire.timer").read_text()
    assert "OnCalendar=2031-03-04 05:06:07 UTC" in timer


def test_user_data_without_expiry():
    text = render_user_data(None, "aliyun")
    assert "ORCH_EXPIRES_AT=''" in text and "ORCH_CLOUD='aliyun'" in text


@pytest.mark.parametrize("bad", ["2031-03-04", "2031-03-04T05:06:07", "soon'; rm -rf /; '"])
def test_user_data_refuses_bad_expiry(bad):
    with pytest.raises(UsageError):
        render_user_data(bad, "aws")


def test_user_data_refuses_unknown_cloud():
    with pytest.raises(UsageError):
        render_user_data(None, "gcp")


def test_script_is_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    require(shellcheck, "shellcheck (apt-get install shellcheck)")
    result = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, textwrap.shorten(result.stdout, 2000)
