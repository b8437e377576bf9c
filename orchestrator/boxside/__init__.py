"""Code that runs ON the box, not in orch: the checkpoint agent and what it needs beside it.

    agent.py             the checkpoint agent's command line (restore, upload, watch), run
                         with the box's python3; the modules it imports, beside it:
    checkpoint_store.py  the store's layout, and upload, prune and restore of a checkpoint
    watcher.py           `watch`: uploads as DIR changes, on a spot notice, and at the end
    cloud_metadata.py    reads metadata.json (below), asks for spot notices
    store_clients.py     picks the S3 client: box_s3.py, boto3 or the aws CLI
    box_s3.py            the standard-library S3 client (SigV4, instance-role credentials)
    agent_log.py         the agent's log lines
    metadata.json        written here at each run: every cloud's instance metadata service,
                         as the cloud supplies it (`box_metadata`,
                         orchestrator/clouds/*/box_metadata.py)

orch ships them as files into the run's folder on the box (orchestrator/run/remote.py's
prepare_script); none of these modules imports anything from `orchestrator` there.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.clouds.registry import ServesBoxMetadata, all_clouds

HERE = Path(__file__).parent
AGENT = HERE / "agent.py"
# The modules agent.py imports, shipped beside it (each imports its siblings by plain name).
AGENT_MODULES = tuple(
    HERE / name
    for name in (
        "checkpoint_store.py",
        "watcher.py",
        "cloud_metadata.py",
        "store_clients.py",
        "box_s3.py",
        "agent_log.py",
    )
)
METADATA_FILE = "metadata.json"  # cloud_metadata.py's METADATA_FILE


def agent_source() -> str:
    return AGENT.read_text()


def metadata_specs() -> dict[str, dict[str, object]]:
    """Cloud name -> its instance metadata entry, for every registered cloud that has one."""
    return {c.name: dict(c.box_metadata) for c in all_clouds() if isinstance(c, ServesBoxMetadata)}


def agent_files(agent_text: str | None = None) -> dict[str, str]:
    """File name -> text of what goes into one folder on the box for the agent (`agent_text`
    replaces agent.py's own)."""
    files = {AGENT.name: agent_source() if agent_text is None else agent_text}
    files.update((module.name, module.read_text()) for module in AGENT_MODULES)
    files[METADATA_FILE] = json.dumps(metadata_specs(), indent=1, sort_keys=True) + "\n"
    return files


def ship(folder: Path) -> Path:
    """Write the agent's files into `folder` as orch does on a box; the agent's path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in agent_files().items():
        (folder / name).write_text(text)
    return folder / AGENT.name
