"""scripts/install_drivers.sh, run by bash against a temporary root with stub commands.

Only the stubs and a short list of harmless tools (date, grep, cat, ...) are on PATH, so the
script can never reach the real package manager or systemd of the machine running the tests.
Each stub appends its argv to a log; the tests assert what the script asked for.

The apt-get and dnf stubs know the package names each OS really has (and refuse others, as
apt "Unable to locate package" and dnf "No match for argument" do, installing nothing), so a
wrong name fails the run as it would on the box:
  - Ubuntu 22.04/24.04 (restricted): nvidia-driver-<branch>-server[-open],
    nvidia-fabricmanager-<branch>, linux-headers-<release>, nvidia-cuda-toolkit
    (packages.ubuntu.com, jammy/noble);
  - Amazon Linux 2023: kernel-devel/-headers/-modules-extra/-modules-extra-common-<release> for
    the 6.1 kernel, kernel6.12-devel/-modules-extra... for the 6.12 one (whose RPM is
    kernel6.12); NVIDIA's amzn2023 repo: module streams <branch>-open/<branch>-dkms/open-dkms/
    latest-dkms, nvidia-open, cuda-drivers, cuda-toolkit, nvidia-fabric-manager (NVIDIA Driver
    Installation Guide, "Kernel Modules");
  - Alibaba Cloud Linux 3: kernel-devel/-headers-<release>, no kernel-modules-extra; NVIDIA's
    rhel8 repo as above.
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
TOOLS = (
    "bash", "sh", "date", "mkdir", "cat", "rm", "mv", "cp", "head", "grep", "chmod", "touch",
    "cut", "tr",
)  # fmt: skip
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
# `uname -r` of each image's kernel, and the RPM that owns it.
KERNELS = {
    "ubuntu-22.04": ("6.8.0-1015-aws", None),
    "ubuntu-24.04": ("6.8.0-1015-aws", None),
    "al2023": ("6.1.148-173.267.amzn2023.x86_64", "kernel"),
    "al2023-6.12": ("6.12.40-63.114.amzn2023.x86_64", "kernel6.12"),
    "alinux3": ("5.10.134-18.al8.x86_64", "kernel"),
    "debian-12": ("6.1.0-28-cloud-amd64", None),
}
BRANCHES = ("550", "570", "580")
UBUNTU_PACKAGES = [
    *(f"nvidia-driver-{b}-server{o}" for b in BRANCHES for o in ("", "-open")),
    *(f"nvidia-fabricmanager-{b}" for b in BRANCHES),
    "nvidia-cuda-toolkit",
    "cuda-toolkit",  # from NVIDIA's apt repo, when the image has it
]
NVIDIA_DNF_PACKAGES = ["nvidia-open", "cuda-drivers", "cuda-toolkit", "nvidia-fabric-manager"]
NVIDIA_DNF_STREAMS = [
    *(f"{b}-{kind}" for b in BRANCHES for kind in ("open", "dkms")),
    "open-dkms",
    "latest-dkms",
]


def distro_packages(os_name: str) -> list[str]:
    release, rpm = KERNELS[os_name]
    if os_name.startswith("ubuntu"):
        return [f"linux-headers-{release}", *UBUNTU_PACKAGES]
    if os_name == "alinux3":
        return [f"kernel-devel-{release}", f"kernel-headers-{release}"]
    parts = ("devel", "headers", "modules-extra", "modules-extra-common")
    return [f"{rpm}-{part}-{release}" for part in parts]


# `lspci -nn -d 10de:` lines in the real format: a T4, a V100, a B200, an NVSwitch bridge.
LSPCI_T4 = (
    "00:1e.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)"
)
LSPCI_V100 = (
    "00:1e.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 SXM2 16GB] "
    "[10de:1db1] (rev a1)"
)
LSPCI_B200 = "18:00.0 3D controller [0302]: NVIDIA Corporation GB100 [B200] [10de:2901] (rev a1)"
LSPCI_NVSWITCH = "c5:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)"

NVIDIA_SMI = """#!/bin/bash
echo "nvidia-smi $*" >>"$STUB_LOG"
case "$1" in
  -L) echo "GPU 0: Tesla T4 (UUID: GPU-d37e67a5-91dd-3774-a5cb-99096249601a)" ;;
  --query-gpu=driver_version) echo "580.95.05" ;;
esac
"""

# apt-get: `install` of a name not in .packages fails (exit 100) and installs nothing.
APT_GET = r"""#!/bin/bash
echo "apt-get $*" >>"$STUB_LOG"
[[ "${STUB_FAIL:-}" == apt-get && "$*" == *install* ]] && exit 100
if [[ " $* " == *" install "* ]]; then
  for arg in "$@"; do
    [[ "$arg" == -* || "$arg" == install || "$arg" == DPkg::* ]] && continue
    grep -qxF -- "$arg" "$STUB_BIN/.packages" || {
      echo "E: Unable to locate package $arg" >&2; exit 100; }
  done
  [[ " $* " == *" nvidia-driver-"* ]] && cp "$STUB_BIN/.nvidia-smi" "$STUB_BIN/nvidia-smi"
fi
exit 0
"""

# dnf: NVIDIA's packages and streams exist only once its repo is added; unknown names fail.
DNF = r"""#!/bin/bash
echo "dnf $*" >>"$STUB_LOG"
[[ "${STUB_FAIL:-}" == dnf && "$*" == *install* ]] && exit 1
known() {
  grep -qxF -- "$1" "$STUB_BIN/.packages" && return 0
  [[ -e "$STUB_BIN/.repo" ]] && grep -qxF -- "$1" "$STUB_BIN/.nvidia-packages"
}
args=("$@")
case " $* " in
  *" config-manager --add-repo "*) touch "$STUB_BIN/.repo" ;;
  *" module enable "*)
    stream="${args[-1]#nvidia-driver:}"
    [[ -e "$STUB_BIN/.repo" ]] && grep -qxF -- "$stream" "$STUB_BIN/.nvidia-streams" || {
      echo "Error: Problems in request: missing groups or modules: ${args[-1]}" >&2; exit 1; }
    echo "$stream" >"$STUB_BIN/.stream" ;;
  *" install "*)
    for arg in "$@"; do
      [[ "$arg" == -* || "$arg" == install ]] && continue
      known "$arg" || { echo "No match for argument: $arg" >&2; exit 1; }
    done
    if [[ " $* " == *" nvidia-open "* || " $* " == *" cuda-drivers "* ]]; then
      [[ -e "$STUB_BIN/.stream" ]] || { echo "no module stream enabled" >&2; exit 1; }
      cp "$STUB_BIN/.nvidia-smi" "$STUB_BIN/nvidia-smi"
    fi ;;
esac
exit 0
"""

# rpm -q --qf '%{NAME}\n' -f /boot/vmlinuz-<release>: the package owning the running kernel.
RPM = """#!/bin/bash
echo "rpm $*" >>"$STUB_LOG"
[[ -n "${STUB_KERNEL_RPM:-}" ]] || exit 1
echo "$STUB_KERNEL_RPM"
"""

# modprobe -r nouveau lets go of the GPU unless STUB_NOUVEAU_STUCK is set.
MODPROBE = """#!/bin/bash
echo "modprobe $*" >>"$STUB_LOG"
if [[ "$1" == -r && "$2" == nouveau && -z "${STUB_NOUVEAU_STUCK:-}" ]]; then
  rm -rf "$ORCH_ROOT/sys/module/nouveau"
fi
"""

LOGGING_STUB = '#!/bin/bash\necho "{name} $*" >>"$STUB_LOG"\n'


class Sandbox:
    def __init__(
        self,
        base: Path,
        os_name: str,
        *,
        lspci: list[str] | None,
        driver: bool,
        kernel: str | None = None,
    ):
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
        self.kernel = kernel or os_name
        self.release, self.kernel_rpm = KERNELS[self.kernel]
        (self.bin / ".packages").write_text("\n".join(distro_packages(self.kernel)) + "\n")
        (self.bin / ".nvidia-packages").write_text("\n".join(NVIDIA_DNF_PACKAGES) + "\n")
        (self.bin / ".nvidia-streams").write_text("\n".join(NVIDIA_DNF_STREAMS) + "\n")
        self._stub("apt-get", APT_GET)
        self._stub("dnf", DNF)
        self._stub("modprobe", MODPROBE)
        initramfs = "update-initramfs" if os_name.startswith("ubuntu") else "dracut"
        for name in ("systemctl", initramfs):
            self._stub(name, LOGGING_STUB.format(name=name))
        if self.kernel_rpm:
            self._stub("rpm", RPM)
        self._stub(
            "uname",
            LOGGING_STUB.format(name="uname")
            + f'if [ "$1" = -m ]; then echo x86_64; else echo {self.release}; fi\n',
        )
        if lspci is not None:
            lines = "\n".join(lspci)
            self._stub("lspci", LOGGING_STUB.format(name="lspci") + f"cat <<'EOF'\n{lines}\nEOF\n")
        (self.bin / ".nvidia-smi").write_text(NVIDIA_SMI)
        (self.bin / ".nvidia-smi").chmod(0o755)
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
            "STUB_KERNEL_RPM": self.kernel_rpm or "",
            **env,
        }
        return subprocess.run([BASH, str(script)], env=environment, capture_output=True, text=True)

    def calls(self, name: str | None = None) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if name is None or line.split()[0] == name]

    def file(self, relative: str) -> Path:
        return self.root / relative

    def install_log(self) -> str:
        return self.file("var/log/orch-install-drivers.log").read_text()


@pytest.fixture
def sandbox(tmp_path):
    if BASH is None:
        pytest.fail("bash is required")

    def make(
        os_name: str,
        *,
        lspci: list[str] | None = None,
        driver: bool = False,
        kernel: str | None = None,
    ) -> Sandbox:
        return Sandbox(
            tmp_path,
            os_name,
            lspci=[LSPCI_T4] if lspci is None else lspci,
            driver=driver,
            kernel=kernel,
        )

    return make


def install_lines(box: Sandbox, manager: str) -> list[str]:
    return [c for c in box.calls(manager) if " install" in c or " module install" in c]


APT = "apt-get -y -q -o DPkg::Lock::Timeout=900"


# ---------------------------------------------------------------------------- OS branches


def test_ubuntu_2204_turing_installs_open_server_driver_headers_and_toolkit(sandbox):
    box = sandbox("ubuntu-22.04")  # T4: Turing, open kernel modules
    result = box.run(ORCH_EXPIRES_AT=FUTURE)
    assert result.returncode == 0, box.install_log()
    assert box.calls("apt-get") == [
        f"{APT} update",
        f"{APT} install --no-install-recommends "
        "linux-headers-6.8.0-1015-aws nvidia-driver-580-server-open nvidia-cuda-toolkit",
    ]
    assert box.calls("dnf") == []
    assert box.calls("modprobe") == ["modprobe nvidia"]
    ready = box.file("var/lib/orch/ready").read_text()
    assert "driver=580.95.05" in ready and "gpus=1" in ready and "os=ubuntu 22.04" in ready
    assert not box.file("var/lib/orch/failed").exists()
    assert "1eb8: open kernel modules, branch 580" in box.install_log()


def test_ubuntu_2404_volta_gets_the_proprietary_driver(sandbox):
    box = sandbox("ubuntu-24.04", lspci=[LSPCI_V100])  # p3: V100, proprietary only
    assert box.run().returncode == 0, box.install_log()
    (install,) = install_lines(box, "apt-get")
    assert install.endswith(
        "linux-headers-6.8.0-1015-aws nvidia-driver-580-server nvidia-cuda-toolkit"
    )


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
        "linux-headers-6.8.0-1015-aws nvidia-driver-550-server-open nvidia-fabricmanager-550 "
        "cuda-toolkit"
    )
    assert "systemctl enable --now nvidia-fabricmanager" in box.calls("systemctl")
    assert "gpus=2" in box.file("var/lib/orch/ready").read_text()  # the bridge is not a GPU


def test_ubuntu_unknown_package_name_fails_the_install(sandbox):
    box = sandbox("ubuntu-22.04")
    assert box.run(ORCH_DRIVER_BRANCH="999").returncode == 1
    assert "failed (exit 100)" in box.file("var/lib/orch/failed").read_text()


def test_al2023_turing_uses_nvidias_open_recipe(sandbox):
    box = sandbox("al2023")
    assert box.run(ORCH_INSTALL_CUDA="1").returncode == 0, box.install_log()
    k = "6.1.148-173.267.amzn2023.x86_64"
    assert box.calls("dnf") == [
        f"dnf -y install kernel-devel-{k}",
        f"dnf -y install kernel-headers-{k}",
        f"dnf -y install kernel-modules-extra-{k}",
        f"dnf -y install kernel-modules-extra-common-{k}",
        "dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/"
        "repos/amzn2023/x86_64/cuda-amzn2023.repo",
        "dnf clean expire-cache",
        "dnf -y module enable nvidia-driver:580-open",
        "dnf -y install nvidia-open",
        "dnf -y install cuda-toolkit",
    ]
    assert box.calls("apt-get") == []
    assert box.file("var/lib/orch/ready").exists()


def test_al2023_kernel_612_names_its_packages_kernel612(sandbox):
    box = sandbox("al2023", kernel="al2023-6.12")
    assert box.run(ORCH_INSTALL_CUDA="0").returncode == 0, box.install_log()
    k = "6.12.40-63.114.amzn2023.x86_64"
    installs = [c for c in box.calls("dnf") if c.startswith("dnf -y install kernel")]
    assert installs == [
        f"dnf -y install kernel6.12-devel-{k}",
        f"dnf -y install kernel6.12-headers-{k}",
        f"dnf -y install kernel6.12-modules-extra-{k}",
        f"dnf -y install kernel6.12-modules-extra-common-{k}",
    ]
    assert "carrying on" not in box.install_log()  # every name existed
    assert box.file("var/lib/orch/ready").exists()


def test_al2023_612_without_rpm_still_finds_the_names(sandbox):
    box = sandbox("al2023", kernel="al2023-6.12")
    (box.bin / "rpm").unlink()
    assert box.run(ORCH_INSTALL_CUDA="0").returncode == 0, box.install_log()
    assert "dnf -y install kernel6.12-devel-6.12.40-63.114.amzn2023.x86_64" in box.calls("dnf")


def test_alinux3_volta_uses_the_proprietary_recipe_without_kernel_extras(sandbox):
    box = sandbox("alinux3", lspci=[LSPCI_V100])  # gn6v: V100
    assert box.run(ORCH_INSTALL_CUDA="1").returncode == 0, box.install_log()
    k = "5.10.134-18.al8.x86_64"
    calls = box.calls("dnf")
    assert calls[0] == f"dnf -y install kernel-devel-{k}"
    assert f"dnf -y install kernel-modules-extra-{k}" in calls  # tried ...
    assert f"'dnf -y install kernel-modules-extra-{k}' failed" in box.install_log()  # ... logged
    assert calls[-5:] == [
        "dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/"
        "repos/rhel8/x86_64/cuda-rhel8.repo",
        "dnf clean expire-cache",
        "dnf -y module enable nvidia-driver:580-dkms",
        "dnf -y install cuda-drivers",
        "dnf -y install cuda-toolkit",
    ]
    assert box.file("var/lib/orch/ready").exists()


def test_missing_kernel_devel_fails_the_install(sandbox):
    box = sandbox("alinux3")
    (box.bin / ".packages").write_text("")
    assert box.run().returncode == 1
    assert "kernel-devel-5.10.134-18.al8.x86_64" in box.file("var/lib/orch/failed").read_text()


def test_blackwell_gets_open_modules(sandbox):
    box = sandbox("al2023", lspci=[LSPCI_B200] * 8 + [LSPCI_NVSWITCH])
    assert box.run(ORCH_INSTALL_CUDA="0").returncode == 0, box.install_log()
    calls = box.calls("dnf")
    assert "dnf -y module enable nvidia-driver:580-open" in calls
    assert "dnf -y install nvidia-open" in calls and "dnf -y install nvidia-fabric-manager" in calls


def test_flavour_and_stream_can_be_chosen(sandbox):
    box = sandbox("al2023")
    result = box.run(ORCH_DRIVER_FLAVOUR="proprietary", ORCH_DNF_DRIVER_STREAM="latest-dkms")
    assert result.returncode == 0, box.install_log()
    assert "dnf -y module enable nvidia-driver:latest-dkms" in box.calls("dnf")
    assert "dnf -y install cuda-drivers" in box.calls("dnf")


def test_unknown_flavour_is_refused(sandbox):
    box = sandbox("ubuntu-22.04")
    assert box.run(ORCH_DRIVER_FLAVOUR="nouveau").returncode == 1
    assert "not open or proprietary" in box.file("var/lib/orch/failed").read_text()
    assert install_lines(box, "apt-get") == []


def test_toolkit_can_be_left_out(sandbox):
    box = sandbox("al2023")
    assert box.run(ORCH_INSTALL_CUDA="0").returncode == 0
    assert not any("cuda-toolkit" in c for c in box.calls("dnf"))


# --------------------------------------------------------------------------------- nouveau


def test_nouveau_that_lets_go_is_unloaded_without_a_reboot(sandbox):
    box = sandbox("ubuntu-22.04")
    box.file("sys/module/nouveau").mkdir(parents=True)
    assert box.run().returncode == 0, box.install_log()
    assert "blacklist nouveau" in box.file("etc/modprobe.d/blacklist-nouveau.conf").read_text()
    assert "modprobe -r nouveau" in box.calls("modprobe")
    assert "systemctl reboot" not in box.calls("systemctl")
    assert box.file("var/lib/orch/ready").exists()


def test_nouveau_holding_the_gpu_reboots_once_and_resumes(sandbox):
    box = sandbox("al2023")
    box.file("sys/module/nouveau").mkdir(parents=True)
    result = box.run(ORCH_EXPIRES_AT=FUTURE, STUB_NOUVEAU_STUCK="1")
    assert result.returncode == 0, box.install_log()
    assert box.calls("systemctl")[-3:] == [
        "systemctl daemon-reload",
        "systemctl enable orch-install-drivers.service",
        "systemctl reboot",
    ]
    assert box.calls("dracut") == ["dracut --force"]
    unit = box.file("etc/systemd/system/orch-install-drivers.service").read_text()
    assert "Type=oneshot" in unit and "ExecStart=/bin/bash /var/lib/orch/install_drivers.sh" in unit
    assert "ConditionPathExists=!/var/lib/orch/ready" in unit
    assert box.file("var/lib/orch/install_drivers.sh").read_text() == SCRIPT.read_text()
    assert not box.file("var/lib/orch/ready").exists()
    assert not box.file("var/lib/orch/failed").exists()  # `orch check` keeps waiting

    # After the reboot the blacklist holds: the unit runs the saved copy of the script.
    box.file("sys/module/nouveau").rmdir()
    before = len(box.calls("systemctl"))
    assert box.run(script=box.file("var/lib/orch/install_drivers.sh")).returncode == 0
    assert box.file("var/lib/orch/ready").exists()
    assert "systemctl disable orch-install-drivers.service" in box.calls("systemctl")[before:]
    assert "systemctl reboot" not in box.calls("systemctl")[before:]
    assert not box.file("etc/systemd/system/orch-install-drivers.service").exists()


def test_nouveau_still_there_after_the_reboot_fails_instead_of_rebooting_again(sandbox):
    box = sandbox("ubuntu-24.04")
    box.file("sys/module/nouveau").mkdir(parents=True)
    assert box.run(STUB_NOUVEAU_STUCK="1").returncode == 0
    (box.bin / "nvidia-smi").unlink()  # the module never loaded
    assert box.run(STUB_NOUVEAU_STUCK="1").returncode == 1
    assert "after a reboot" in box.file("var/lib/orch/failed").read_text()
    assert box.calls("systemctl").count("systemctl reboot") == 1


# ------------------------------------------------------------------- skip and idempotency


def test_preinstalled_driver_skips_the_install(sandbox):
    box = sandbox("ubuntu-22.04", driver=True)  # a Deep Learning AMI
    assert box.run(ORCH_EXPIRES_AT=FUTURE).returncode == 0
    assert box.calls("apt-get") == [] and box.calls("modprobe") == []
    assert box.file("etc/systemd/system/orch-expire.timer").exists()
    assert "driver=580.95.05" in box.file("var/lib/orch/ready").read_text()


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
    (device / "device").write_text("0x1DB1\n")  # V100 SXM2 16GB: proprietary modules
    assert box.run().returncode == 0
    assert "gpus=1" in box.file("var/lib/orch/ready").read_text()
    assert "dnf -y module enable nvidia-driver:580-dkms" in box.calls("dnf")


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
