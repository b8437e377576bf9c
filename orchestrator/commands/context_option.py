"""`--cuda-context-gib GIB|box:NAME`: the CUDA context figure the memory estimate adds."""

from __future__ import annotations

import math

from orchestrator.errors import UsageError

MAX_CONTEXT_GIB = 16.0


def parse_context_option(value: str) -> tuple[float, str]:
    """(GiB, basis) from a number, or from the driver a box's last `orch check` recorded."""
    text = str(value).strip()
    if text.startswith("box:"):
        return _from_box(text[4:])
    try:
        gib = float(text)
    except ValueError:
        raise UsageError(
            f"--cuda-context-gib must be a number of GiB or box:NAME, got {value!r}"
        ) from None
    if not math.isfinite(gib) or not 0 <= gib <= MAX_CONTEXT_GIB:
        raise UsageError(f"--cuda-context-gib must be between 0 and {MAX_CONTEXT_GIB:g} GiB")
    return gib, "--cuda-context-gib"


def _from_box(name: str) -> tuple[float, str]:
    from orchestrator.check.record import driver_versions, load_check
    from orchestrator.provision.boxes import box_directory, validate_box_name
    from orchestrator.sizing.overhead import context_for_driver

    validate_box_name(name)
    report = load_check(box_directory(name))
    if report is None:
        raise UsageError(
            f"box {name!r} has no recorded check", hint=f"run `orch check {name}` first"
        )
    for version in driver_versions(report):
        found = context_for_driver(version)
        if found is not None:
            return found.gib, f"orch check of box {name}: {found.basis}"
    raise UsageError(f"the recorded check of box {name!r} names no NVIDIA driver version")
