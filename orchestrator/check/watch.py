"""`orch watch`: sample GPU utilisation and memory every few seconds and warn about waste.

Two warnings, each raised once when its condition starts and re-armed when it clears:
  - low utilisation: every sample in the last `window` seconds is under `low_util_pct` on a
    GPU (the box is probably bigger than the job needs: a smaller plan would cost less);
  - memory nearly full: a GPU uses more than `memory_full_fraction` of its memory (the next
    larger batch or sequence will run out of memory).
GPUs that report utilisation as N/A (MIG mode) are not judged on utilisation.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from orchestrator.check import nvidia_smi
from orchestrator.check.transport import CommandResult, OutputTooLarge, Transport, Unreachable
from orchestrator.check.verify import EXIT_NO_DRIVER, EXIT_TIMED_OUT, bounded_query
from orchestrator.errors import EXIT_CHECK_FAILED, OrchError

LOW_UTIL_PCT = 30
MEMORY_FULL_FRACTION = 0.95
# One sample may take its interval, but never less than this (an SSH round trip through a
# bastion takes a second or two) and never more than the watch's per-sample timeout.
MIN_SAMPLE_S = 5.0


@dataclass(slots=True)
class Sample:
    at: float  # time.time()
    gpus: list[nvidia_smi.GpuUsage]
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    # Why there is no reading: "unreachable" (no answer), "skipped" (an answer that is not a
    # reading: malformed, too large, nvidia-smi hung and was stopped).
    error_kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "warnings": self.warnings,
            "error": self.error,
            "error_kind": self.error_kind,
        }


class UsageMonitor:
    def __init__(
        self,
        *,
        window_samples: int,
        low_util_pct: float = LOW_UTIL_PCT,
        memory_full_fraction: float = MEMORY_FULL_FRACTION,
    ):
        self.window_samples = max(1, window_samples)
        self.low_util_pct = low_util_pct
        self.memory_full_fraction = memory_full_fraction
        self._util: dict[int, deque[int]] = {}
        self._low_warned: set[int] = set()
        self._full_warned: set[int] = set()

    def add(self, gpus: list[nvidia_smi.GpuUsage]) -> list[str]:
        warnings = []
        for gpu in gpus:
            warnings += self._check_utilisation(gpu)
            warnings += self._check_memory(gpu)
        return warnings

    def _check_utilisation(self, gpu: nvidia_smi.GpuUsage) -> list[str]:
        if gpu.utilization_pct is None:
            return []
        history = self._util.setdefault(gpu.index, deque(maxlen=self.window_samples))
        history.append(gpu.utilization_pct)
        low = len(history) == self.window_samples and max(history) < self.low_util_pct
        if not low:
            self._low_warned.discard(gpu.index)
            return []
        if gpu.index in self._low_warned:
            return []
        self._low_warned.add(gpu.index)
        mean = sum(history) / len(history)
        return [
            f"GPU {gpu.index}: utilisation under {self.low_util_pct:g}% for the last "
            f"{len(history)} samples (mean {mean:.0f}%): the box may be larger than the job "
            "needs; a smaller instance would cost less"
        ]

    def _check_memory(self, gpu: nvidia_smi.GpuUsage) -> list[str]:
        fraction = gpu.memory_fraction
        if fraction is None or fraction <= self.memory_full_fraction:
            self._full_warned.discard(gpu.index)
            return []
        if gpu.index in self._full_warned:
            return []
        self._full_warned.add(gpu.index)
        return [
            f"GPU {gpu.index}: memory {fraction:.0%} full ({gpu.memory_used_mib}/"
            f"{gpu.memory_total_mib} MiB): a larger batch or sequence will run out of memory"
        ]


def window_samples(window_s: float, interval_s: float) -> int:
    return max(1, math.ceil(window_s / max(interval_s, 0.001)))


def sample_timeout(interval: float, timeout: float) -> float:
    """How long one sample may take: about its interval, within [MIN_SAMPLE_S, timeout]."""
    return min(timeout, max(interval, MIN_SAMPLE_S))


class SkippedSample(OrchError):
    """The box answered, but not with a reading; the watch reports it and goes on."""


def _query(transport: Transport, timeout: float) -> list[nvidia_smi.GpuUsage]:
    # nvidia-smi is stopped on the box a little before we stop waiting, so a hung one neither
    # outlives the sample nor leaves us waiting longer than the sample may take.
    script = bounded_query(nvidia_smi.USAGE_FIELDS, max(1.0, timeout - 2))
    try:
        result: CommandResult = transport.run(
            f"command -v nvidia-smi >/dev/null 2>&1 || exit {EXIT_NO_DRIVER}; {script}",
            timeout=timeout,
        )
    except OutputTooLarge as exc:
        raise SkippedSample(exc.message) from None
    if result.exit_code == EXIT_TIMED_OUT:
        raise SkippedSample("nvidia-smi did not answer in time and was stopped on the box")
    if result.exit_code == EXIT_NO_DRIVER:
        raise OrchError(
            f"nvidia-smi not found on {transport.description}", exit_code=EXIT_CHECK_FAILED
        )
    if result.exit_code != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[:1]
        raise OrchError(
            f"nvidia-smi failed (exit {result.exit_code}): {detail[0][:300] if detail else ''}",
            exit_code=EXIT_CHECK_FAILED,
        )
    try:
        return nvidia_smi.parse_usage(result.stdout)
    except nvidia_smi.NvidiaSmiParseError as exc:
        raise SkippedSample(f"malformed sample skipped: {exc.message}") from None


def watch(
    transport: Transport,
    *,
    interval: float,
    count: int | None,
    monitor: UsageMonitor,
    timeout: float = 30,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Sample]:
    """Yield one Sample per interval (forever when count is None).

    An unreachable box or an answer that is not a reading yields a Sample with `error` set
    and the watch goes on; a missing or failing nvidia-smi raises OrchError (exit 3), since
    waiting will not fix it. Each sample takes at most `sample_timeout(interval, timeout)`.
    """
    taken = 0
    per_sample = sample_timeout(interval, timeout)
    while count is None or taken < count:
        started = time.monotonic()
        at = time.time()
        try:
            gpus = _query(transport, per_sample)
        except Unreachable as exc:
            yield Sample(at, [], error=exc.message, error_kind="unreachable")
        except SkippedSample as exc:
            yield Sample(at, [], error=exc.message, error_kind="skipped")
        else:
            yield Sample(at, gpus, warnings=monitor.add(gpus))
        taken += 1
        if count is None or taken < count:
            sleep(max(0.0, interval - (time.monotonic() - started)))
