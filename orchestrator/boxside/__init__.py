"""Code that runs ON the box, not in orch: the checkpoint agent and what it needs beside it.

    agent.py       the checkpoint agent (restore, upload, watch), run with the box's python3
    box_s3.py      its standard-library S3 client (SigV4, instance-role credentials)
    metadata.json  written here at each run: every cloud's instance metadata service, as the
                   cloud supplies it (`box_metadata`, orchestrator/clouds/*/box_metadata.py)

orch ships them as files into the run's folder on the box (orchestrator/run/remote.py's
prepare_script); agent.py and box_s3.py import nothing from `orchestrator` there.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.clouds.registry import ServesBoxMetadata, all_clouds

HERE = Path(__file__).parent
AGENT = HERE / "agent.py"
S3_CLIENT = HERE / "box_s3.py"
METADATA_FILE = "metadata.json"  # agent.py's METADATA_FILE


def agent_source() -> str:
    return AGENT.read_text()


def metadata_specs() -> dict[str, dict[str, object]]:
    """Cloud name -> its instance metadata entry, for every registered cloud that has one."""
    return {c.name: dict(c.box_metadata) for c in all_clouds() if isinstance(c, ServesBoxMetadata)}


def agent_files(agent_text: str | None = None) -> dict[str, str]:
    """File name -> text of what goes into one folder on the box for the agent."""
    return {
        "agent.py": agent_source() if agent_text is None else agent_text,
        "box_s3.py": S3_CLIENT.read_text(),
        METADATA_FILE: json.dumps(metadata_specs(), indent=1, sort_keys=True) + "\n",
    }


def ship(folder: Path) -> Path:
    """Write the agent's files into `folder` as orch does on a box; the agent's path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in agent_files().items():
        (folder / name).write_text(text)
    return folder / AGENT.name
