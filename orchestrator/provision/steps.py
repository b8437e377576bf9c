"""The steps `up` and `down` share on one box: its Terraform (init with its backend, destroy),
the one place its state changes (`set_state`), and publishing its record next to remote
state."""

from __future__ import annotations

import os
from collections.abc import Callable

from orchestrator.check.untrusted import printable
from orchestrator.errors import OrchError
from orchestrator.provision import liveness, state_backend
from orchestrator.provision.boxes import Box
from orchestrator.provision.render import (
    BACKEND_FILE,
    RENDERED_FILES,
    TFVARS_FILE,
    cloud_runtime_env,
    write_json,
)
from orchestrator.provision.terraform import LOCK_TIMEOUT, Interrupted, Terraform, TerraformError

Say = Callable[[str], None]
Location = state_backend.StateLocation | None  # where a box's remote state lives, if anywhere


def terraform_for(box: Box, progress: Say | None) -> Terraform:
    def started(pid: int, command: str) -> None:
        # Recorded so `status` can show the live apply (or that its orch is gone).
        if box.runner is not None:
            box.runner.update(
                terraform_pid=pid,
                terraform=command,
                terraform_started=liveness.process_start(pid),
            )
            box.save()

    return Terraform(
        box.directory, env=cloud_runtime_env(box.cloud), progress=progress, on_start=started
    )


def init(box: Box, terraform: Terraform, location: Location) -> None:
    if location is None:
        terraform.init()
        return
    region = state_backend.bucket_region(location)
    path = box.directory / BACKEND_FILE
    write_json(path, state_backend.backend_config(location, box.name, region))
    terraform.init(backend_config=path)


def destroy(
    box: Box, location: Location, progress: Say | None, before: Callable[[], None] | None = None
) -> None:
    terraform = terraform_for(box, progress)
    init(box, terraform, location)
    if before is not None:
        before()
    terraform.destroy()


def tell_state_lock(box: Box, previous: dict | None, location: Location, say: Say) -> None:
    """Before apply/destroy: say who holds Terraform's state lock, instead of waiting silently
    (Terraform waits up to -lock-timeout for it)."""
    orphan = liveness.terraform_alive(previous) if previous else None
    if orphan and not liveness.is_alive(previous or {}):
        say(
            f"waiting for Terraform's state lock of box {box.name}: terraform "
            f"{(previous or {}).get('terraform') or ''} pid {orphan}, left by an orch that is "
            "gone, still holds it"
        )
    if location is None:
        return
    info = state_backend.lock_info(location, box.name, state_backend.bucket_region(location))
    if info is not None:
        # The lock object is the bucket's (whoever can write it wrote it): escaped, and short.
        who, what, since, lock_id = (
            printable(info.get(key, "?"), 100) for key in ("Who", "Operation", "Created", "ID")
        )
        say(
            f"waiting for Terraform's state lock of box {box.name}: held by {who} ({what} "
            f"since {since}, lock ID {lock_id}); up to {LOCK_TIMEOUT}; a stale lock: see "
            "docs/provisioning.md"
        )


def destroy_or_fail(box: Box, location: Location, progress: Say | None) -> None:
    """Destroy a partial box during `up`; if that fails, leave it "failed" for `down`."""
    try:
        destroy(box, location, progress)
    except (TerraformError, Interrupted) as exc:
        set_state(box, "failed", exc.message, location)
        if isinstance(exc, Interrupted):
            raise
        raise OrchError(
            f"could not remove the partial box {box.name}: {exc.message}",
            hint=f"`orch down {box.name}` retries",
        ) from None


def has_resources(box: Box, location: Location) -> bool:
    """Whether an earlier attempt may have left resources (conservative: any state at all)."""
    if not (box.directory / "main.tf").exists():
        return False
    if location is not None:
        return True  # remote state: ask Terraform (destroy of nothing is cheap enough)
    state = box.directory / "terraform.tfstate"
    return state.exists() and '"mode": "managed"' in state.read_text()


def publish(box: Box, location: Location) -> None:
    """Store record + rendered module next to the remote state (no-op for local state)."""
    if location is None:
        return
    files = state_backend.collect_files(
        box.directory, [*RENDERED_FILES, TFVARS_FILE, "modules", ".terraform.lock.hcl"]
    )
    state_backend.upload_bundle(
        location,
        box.name,
        state_backend.bucket_region(location),
        {"box": box.to_dict(), "files": files},
    )


def set_state(box: Box, state: str, error: str | None = None, publish_to: Location = None) -> None:
    """The one place a box's state changes: save the record (and publish it with remote
    state, when `publish_to` is the box's location)."""
    box.state, box.error = state, error
    if state in ("creating", "destroying"):
        if not box.runner or box.runner.get("pid") != os.getpid():
            box.runner = liveness.this_process("up" if state == "creating" else "down")
    else:
        box.runner = None
    box.save()
    publish(box, publish_to)
