"""`orch check`: ask a box's nvidia-smi what GPUs it has and compare them with its plan.

The box may still be booting: SSH refuses connections, or the driver installer (user data)
is still running. `check_box` retries with exponential back-off until the box answers with a
usable nvidia-smi or the timeout passes. A box that answers but does not match is a
*mismatch* (report.ok False, exit 3); one that never answers raises `Unreachable` (exit 1).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.check import drivers, nvidia_smi
from orchestrator.check.transport import (
    CommandResult,
    LocalTransport,
    OutputTooLarge,
    Transport,
    Unreachable,
    backoff_delays,
    sleep_until,
    transport_for_box,
)
from orchestrator.errors import EXIT_CHECK_FAILED, EXIT_OK, OrchError
from orchestrator.textui import counted

if TYPE_CHECKING:
    from orchestrator.plan import Candidate
    from orchestrator.provision.boxes import Box

# nvidia-smi reports less than the marketing size (ECC, driver reservations): T4 15360 MiB of
# 16 GiB (0.94), A10G 23028 of 24 GiB (0.94), H100 81559 of 80 GiB (0.996). A reading outside
# this band is a different memory size (a 40 GB card where 80 GB was planned), not overhead.
MEMORY_MIN_FRACTION = 0.90
MEMORY_MAX_FRACTION = 1.02

# Markers written by scripts/install_drivers.sh.
READY_MARKER = "/var/lib/orch/ready"
FAILED_MARKER = "/var/lib/orch/failed"
INSTALL_LOG = "/var/log/orch-install-drivers.log"
EXIT_NOT_READY = 75  # EX_TEMPFAIL: installer still running, try again
EXIT_NO_DRIVER = 127
EXIT_TIMED_OUT = 124  # coreutils `timeout`: nvidia-smi hung and was killed on the box
# nvidia-smi answers in a second or two; one that hangs (a wedged driver) is killed on the box
# after this long, so it is not left running there when we give up on it.
NVIDIA_SMI_LIMIT_S = 30


@dataclass(slots=True)
class Expected:
    gpu: str | None = None
    gpu_count: int | None = None
    gpu_memory_gib: float | None = None
    cuda: str | None = None  # the CUDA version the image's software needs, when it says

    @classmethod
    def from_candidate(cls, candidate: Candidate) -> Expected:
        cuda = (candidate.image or {}).get("cuda")
        return cls(
            candidate.gpu,
            candidate.gpu_count,
            candidate.gpu_memory_gib,
            str(cuda) if cuda else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "gpu_memory_gib": self.gpu_memory_gib,
            "cuda": self.cuda,
        }


@dataclass(slots=True)
class Check:
    name: str  # "reachable", "driver", "gpu_count", "gpu_model", "gpu_memory", "ecc"
    ok: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "message": self.message}


@dataclass(slots=True)
class CheckReport:
    box: str | None
    transport: str
    expected: Expected
    gpus: list[nvidia_smi.GpuInventory] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    attempts: int = 0
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_CHECK_FAILED

    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "box": self.box,
            "transport": self.transport,
            "ok": self.ok,
            "expected": self.expected.to_dict(),
            "gpus": [
                {**gpu.to_dict(), "catalog_name": nvidia_smi.canonical_gpu_name(gpu.name)}
                for gpu in self.gpus
            ],
            "checks": [check.to_dict() for check in self.checks],
            "attempts": self.attempts,
            "elapsed_s": round(self.elapsed_s, 2),
        }


# ------------------------------------------------------------------------------ the probe


def bounded_query(fields: tuple[str, ...], limit_s: float = NVIDIA_SMI_LIMIT_S) -> str:
    """`exec nvidia-smi ...` under the box's `timeout` (coreutils) when it has one."""
    query = shlex.join(nvidia_smi.query_argv(fields))
    limit = max(1, int(limit_s))
    return (
        f"if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 {limit} {query}; "
        f"else exec {query}; fi"
    )


def probe_script(
    fields: tuple[str, ...] = nvidia_smi.INVENTORY_FIELDS, limit_s: float = NVIDIA_SMI_LIMIT_S
) -> str:
    """POSIX sh run on the box: nvidia-smi if present, else why not (as an exit code)."""
    query = bounded_query(fields, limit_s)
    return (
        # cloud-init has not finished, or our installer is still running: not ready yet.
        f"if [ -d /var/lib/cloud/instance ] && [ ! -e /var/lib/cloud/instance/boot-finished ]"
        f" || {{ [ -e {INSTALL_LOG} ] && [ ! -e {READY_MARKER} ] && [ ! -e {FAILED_MARKER} ]; }};"
        f" then echo 'driver installation still running' >&2; exit {EXIT_NOT_READY}; fi; "
        f"if command -v nvidia-smi >/dev/null 2>&1; then {query}; fi; "
        f"if [ -e {FAILED_MARKER} ]; then"
        f' echo "driver installation failed: $(head -c 300 {FAILED_MARKER})" >&2;'
        f" exit {EXIT_NO_DRIVER}; fi; "
        f"echo 'nvidia-smi not found: no NVIDIA driver installed' >&2; exit {EXIT_NO_DRIVER}"
    )


def _run_until_answer(
    transport: Transport, script: str, timeout: float
) -> tuple[CommandResult, int]:
    """Run `script`, retrying while the box is unreachable or not ready, until `timeout`."""
    deadline = time.monotonic() + timeout
    attempts = 0
    last_problem = "no attempt made"
    for delay in backoff_delays():
        attempts += 1
        remaining = max(deadline - time.monotonic(), 1.0)
        try:
            result = transport.run(script, timeout=min(remaining, 120.0))
        except Unreachable as exc:
            last_problem = exc.message
        else:
            if result.exit_code != EXIT_NOT_READY:
                return result, attempts
            last_problem = "the box answered but its driver installation was still running"
        if not sleep_until(deadline, delay):
            break
    raise Unreachable(
        f"no usable answer from {transport.description} after {timeout:.0f}s "
        f"({attempts} attempts): {last_problem}",
        hint="raise --timeout, or see /var/log/orch-install-drivers.log on the box",
    )


# ----------------------------------------------------------------------------- evaluation


def evaluate(gpus: list[nvidia_smi.GpuInventory], expected: Expected) -> list[Check]:
    """Compare what nvidia-smi reported with what the plan promised."""
    checks: list[Check] = []
    if not gpus:
        checks.append(Check("driver", False, "nvidia-smi ran but reported no GPUs"))
    else:
        checks.append(_driver_check(gpus, expected))

    if gpus:
        checks.append(_identity_check(gpus))

    if expected.gpu_count is not None:
        found = _distinct_count(gpus)
        checks.append(
            Check(
                "gpu_count",
                found == expected.gpu_count,
                f"{counted(found, 'GPU')} found, {expected.gpu_count} expected",
            )
        )

    if expected.gpu is not None and gpus:
        table = nvidia_smi.name_table()
        wrong = []
        for gpu in gpus:
            canonical = nvidia_smi.canonical_gpu_name(gpu.name, table)
            if canonical != expected.gpu:
                shown = f"{gpu.name!r}" + (f" ({canonical})" if canonical else " (unknown)")
                wrong.append(f"GPU {gpu.index} is {shown}")
        checks.append(
            Check(
                "gpu_model",
                not wrong,
                "; ".join(wrong) + f", {expected.gpu} expected"
                if wrong
                else f"all {counted(len(gpus), 'GPU')} are {expected.gpu} ({gpus[0].name})",
            )
        )

    if expected.gpu_memory_gib is not None and gpus:
        planned_mib = expected.gpu_memory_gib * 1024
        low, high = planned_mib * MEMORY_MIN_FRACTION, planned_mib * MEMORY_MAX_FRACTION
        wrong = []
        for gpu in gpus:
            if gpu.memory_total_mib is None:
                wrong.append(f"GPU {gpu.index} reports no memory size")
            elif not low <= gpu.memory_total_mib <= high:
                wrong.append(f"GPU {gpu.index} has {gpu.memory_total_mib} MiB")
        sizes = sorted({g.memory_total_mib for g in gpus if g.memory_total_mib is not None})
        checks.append(
            Check(
                "gpu_memory",
                not wrong,
                ("; ".join(wrong) if wrong else f"{', '.join(str(s) for s in sizes)} MiB per GPU")
                + f", {expected.gpu_memory_gib:g} GiB planned (accepted {low:.0f}-{high:.0f} MiB)",
            )
        )

    if gpus:
        bad = [g for g in gpus if g.ecc_uncorrected]
        unknown = [g for g in gpus if g.ecc_uncorrected is None]
        if bad:
            detail = ", ".join(f"GPU {g.index}: {g.ecc_uncorrected}" for g in bad)
            checks.append(Check("ecc", False, f"uncorrected ECC errors since boot ({detail})"))
        else:
            note = f" ({counted(len(unknown), 'GPU')} without ECC reporting)" if unknown else ""
            checks.append(Check("ecc", True, "no uncorrected ECC errors" + note))
    return checks


def _architecture(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    try:
        from orchestrator.catalog import load_gpus

        known = load_gpus().get(gpu)
    except (ImportError, OrchError):
        return None
    return known.architecture if known else None


def _driver_check(gpus: list[nvidia_smi.GpuInventory], expected: Expected) -> Check:
    """One driver version on every GPU, new enough for the GPU and for the image's CUDA."""
    versions = sorted({g.driver_version for g in gpus if g.driver_version})
    if not versions:
        return Check("driver", False, "nvidia-smi reported no driver version")
    if len(versions) > 1:
        return Check("driver", False, f"GPUs report different drivers: {', '.join(versions)}")
    (text,) = versions
    version = drivers.parse_version(text)
    if version is None:
        return Check("driver", False, f"driver version {text[:60]!r} is not a version number")
    table = nvidia_smi.name_table()
    found = {nvidia_smi.canonical_gpu_name(g.name, table) for g in gpus} - {None}
    gpu = expected.gpu or (found.pop() if len(found) == 1 else None)
    needs = drivers.requirements(gpu, _architecture(gpu), expected.cuda)
    short = [need for need in needs if version < need.version]
    if short:
        return Check(
            "driver",
            False,
            f"NVIDIA driver {text} is too old: {'; '.join(n.reason for n in short)}",
        )
    floor = f" (>= {drivers.show(max(n.version for n in needs))} needed)" if needs else ""
    return Check("driver", True, f"NVIDIA driver {text}{floor}")


def _distinct_count(gpus: list[nvidia_smi.GpuInventory]) -> int:
    return len({g.index for g in gpus})


def _identity_check(gpus: list[nvidia_smi.GpuInventory]) -> Check:
    """Each GPU once: a row repeated (same index, UUID or bus id) is not a second GPU."""
    repeated = []
    for label, values in (
        ("index", [g.index for g in gpus]),
        ("UUID", [g.uuid for g in gpus if g.uuid]),
        ("bus id", [g.pci_bus_id for g in gpus if g.pci_bus_id]),
    ):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            repeated.append(f"{label} {', '.join(t[:60] for t in twice)} listed more than once")
    if repeated:
        return Check("gpu_ids", False, "; ".join(repeated))
    return Check("gpu_ids", True, f"{counted(len(gpus), 'distinct GPU')}")


def _checks_from_answer(result: CommandResult) -> tuple[list[nvidia_smi.GpuInventory], list[Check]]:
    if result.exit_code == EXIT_NO_DRIVER:
        # Cloud agents merge stderr into stdout.
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
        return [], [Check("driver", False, message[0] if message else "nvidia-smi not found")]
    if result.exit_code == EXIT_TIMED_OUT:
        message = "nvidia-smi did not answer in time and was stopped on the box (hung driver?)"
        return [], [Check("driver", False, message)]
    if result.exit_code != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[:1]
        text = detail[0][:300] if detail else "no output"
        return [], [Check("driver", False, f"nvidia-smi failed (exit {result.exit_code}): {text}")]
    try:
        gpus = nvidia_smi.parse_inventory(result.stdout)
    except nvidia_smi.NvidiaSmiParseError as exc:
        return [], [Check("driver", False, exc.message)]
    return gpus, []


def run_check(
    transport: Transport, expected: Expected, *, box_name: str | None, timeout: float
) -> CheckReport:
    started = time.monotonic()
    limit = min(NVIDIA_SMI_LIMIT_S, max(1.0, timeout - 5))
    try:
        result, attempts = _run_until_answer(transport, probe_script(limit_s=limit), timeout)
    except OutputTooLarge as exc:
        report = CheckReport(box_name, transport.description, expected, attempts=1)
        report.checks.append(Check("reachable", True, "answered"))
        report.checks.append(Check("driver", False, exc.message))
        report.elapsed_s = time.monotonic() - started
        return report
    report = CheckReport(box_name, transport.description, expected, attempts=attempts)
    report.checks.append(Check("reachable", True, f"answered after {counted(attempts, 'attempt')}"))
    gpus, failures = _checks_from_answer(result)
    report.gpus = gpus
    report.checks += failures or evaluate(gpus, expected)
    report.elapsed_s = time.monotonic() - started
    return report


# ------------------------------------------------------------------------------ public API


def check_box(
    box: Box, ssh_config: str | None = None, timeout: float = 600, *, via: str = "ssh"
) -> CheckReport:
    """Verify a box's GPUs against its plan. Raises Unreachable (exit 1) if it never answers."""
    transport = transport_for_box(box, via=via, ssh_config=ssh_config)
    return run_check(
        transport, Expected.from_candidate(box.candidate), box_name=box.name, timeout=timeout
    )


def check_local(expected: Expected | None = None, timeout: float = 60) -> CheckReport:
    """Check the machine this runs on (no retries needed: it is here)."""
    report = run_check(LocalTransport(), expected or Expected(), box_name=None, timeout=timeout)
    driver = next((c for c in report.checks if c.name == "driver"), None)
    if driver and not driver.ok and "not found" in driver.message and not report.gpus:
        raise OrchError(
            "nvidia-smi not found on this machine: no NVIDIA driver installed",
            exit_code=EXIT_CHECK_FAILED,
        )
    return report
