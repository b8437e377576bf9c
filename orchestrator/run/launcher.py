"""How the job's command starts on each node: under PyTorch's torchrun, or as written with the
cluster's shape in its environment (issue 24). Pure functions: argv and environment only.

`--launcher torchrun` wraps CMD in torchrun (torch.distributed.run) on every node:

    torchrun --nnodes N --nproc-per-node GPUS --node-rank I --rdzv-backend static
             --rdzv-endpoint RANK0_PRIVATE_IP:PORT --rdzv-id RUN_ID --rdzv-conf timeout=T
             --local-addr NODE_PRIVATE_IP --max-restarts 0 CMD...

A CMD that starts with a Python interpreter (`python train.py ...`, `python3 -m pkg ...`) runs
as `PYTHON -m torch.distributed.run OPTIONS train.py ...`, so the interpreter the user named
(a virtual environment's) is the one torch comes from; any other CMD runs as
`torchrun OPTIONS --no-python CMD...`. A Python CMD that gives the interpreter options of its
own (`python -u train.py`: torchrun's parser takes no `-u`, and its workers start as `python -u
SCRIPT` without the others) runs as `PYTHON -m torch.distributed.run OPTIONS --no-python
CMD...`: each worker runs CMD as written. The options follow torchrun's documentation
(https://docs.pytorch.org/docs/stable/elastic/run.html).

The rendezvous is torchrun's `static` one, hosted by rank 0 (a TCPStore at rank 0's private
address), not `c10d`: c10d ignores --node-rank (torchrun says so: "node_rank is only used for
static rdzv_backend") and numbers the nodes by sorting their addresses as strings
(torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, torch 2.13: `enumerate(sorted(
state.participants))`), so "10.0.1.10" would become global rank 0 before "10.0.1.9". orch's
node 0 must hold global rank 0: its output is the one streamed, its --fetch paths are
fetched and its checkpoints uploaded. With `static`, node I's workers are global ranks
I*GPUS .. I*GPUS+GPUS-1 (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py), as
SkyPilot's and dstack's multi-node examples launch torchrun. `timeout` bounds the wait for
every node to join (the store's "waiting for clients"; a node that cannot reach rank 0 gives
up after it too). PORT, and MASTER_PORT below, are ports node 0 names free just before each
attempt (check/ports.py); only when it cannot are they derived from the run id (29400 and
29500 plus 0-99). `--max-restarts 0`: a failed worker ends the node's job; orch, not
torchrun, decides what happens after a lost node.

`--launcher none` runs CMD as written, with ORCH_NODE_RANK, ORCH_NUM_NODES, ORCH_NODE_IPS
(private addresses, rank order, comma-separated), ORCH_GPUS_PER_NODE, MASTER_ADDR and
MASTER_PORT in its environment, for a launcher of the user's own (deepspeed, accelerate).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath

from orchestrator.errors import UsageError

LAUNCHERS = ("auto", "torchrun", "none")
RDZV_PORT_BASE = 29400  # torchrun's default rendezvous port
MASTER_PORT_BASE = 29500  # torch.distributed's customary MASTER_PORT
PORT_SPREAD = 100  # without ports from node 0: base + a number from the run id
NODE_ENV = ("ORCH_NODE_RANK", "ORCH_NUM_NODES", "ORCH_NODE_IPS", "ORCH_GPUS_PER_NODE")
MASTER_ENV = ("MASTER_ADDR", "MASTER_PORT")
_PYTHON = re.compile(r"python(?:3(?:\.\d{1,2})?)?")
MIN_JOIN_TIMEOUT_S = 10
MAX_JOIN_TIMEOUT_S = 86400


@dataclass(frozen=True, slots=True)
class Topology:
    """The cluster as the job sees it: every node runs the same CMD with its own rank."""

    node_ips: tuple[str, ...]  # private addresses, rank 0 first (rank 0 hosts the rendezvous)
    gpus_per_node: int
    run_id: str
    join_timeout_s: int = 600
    # (rendezvous, MASTER_PORT) as node 0 named them free (check/ports.py); None: derived
    # from the run id, when node 0 could not say.
    ports: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.ports is not None and (
            len(set(self.ports)) != 2 or not all(1024 <= p <= 65535 for p in self.ports)
        ):
            raise UsageError(f"rendezvous ports {self.ports}: two distinct ports, 1024-65535")
        if not self.node_ips or not all(self.node_ips):
            raise UsageError("every node of the cluster needs a private address")
        if self.gpus_per_node < 1:
            raise UsageError(f"a node has {self.gpus_per_node} GPUs: at least 1 is needed")
        if not MIN_JOIN_TIMEOUT_S <= self.join_timeout_s <= MAX_JOIN_TIMEOUT_S:
            raise UsageError(
                f"the rendezvous timeout must be {MIN_JOIN_TIMEOUT_S} s to 1 day,"
                f" not {self.join_timeout_s} s"
            )

    @property
    def num_nodes(self) -> int:
        return len(self.node_ips)

    @property
    def master_addr(self) -> str:
        return self.node_ips[0]

    @property
    def rdzv_port(self) -> int:
        return self.ports[0] if self.ports else RDZV_PORT_BASE + self._offset

    @property
    def master_port(self) -> int:
        return self.ports[1] if self.ports else MASTER_PORT_BASE + self._offset

    @property
    def _offset(self) -> int:
        return zlib.crc32(self.run_id.encode()) % PORT_SPREAD


def resolve_launcher(choice: str, num_nodes: int, gpus_per_node: int) -> str:
    """`auto`: torchrun when there is more than one GPU or node (an 8-GPU box is used as 8
    GPUs), else none."""
    if choice not in LAUNCHERS:
        raise UsageError(f"--launcher {choice!r}: expected one of {', '.join(LAUNCHERS)}")
    if choice != "auto":
        return choice
    return "torchrun" if num_nodes > 1 or gpus_per_node > 1 else "none"


def node_env(topology: Topology, rank: int, launcher: str) -> dict[str, str]:
    """What node `rank` adds to the job's environment. MASTER_ADDR and MASTER_PORT only with
    --launcher none on a cluster: under torchrun, torchrun sets them for each worker, and a
    single box's own job may set them as it likes."""
    _check_rank(topology, rank)
    env = {
        "ORCH_NODE_RANK": str(rank),
        "ORCH_NUM_NODES": str(topology.num_nodes),
        "ORCH_NODE_IPS": ",".join(topology.node_ips),
        "ORCH_GPUS_PER_NODE": str(topology.gpus_per_node),
    }
    if launcher == "none" and topology.num_nodes > 1:
        env.update(MASTER_ADDR=topology.master_addr, MASTER_PORT=str(topology.master_port))
    return env


def torchrun_options(topology: Topology, rank: int) -> list[str]:
    _check_rank(topology, rank)
    return [
        f"--nnodes={topology.num_nodes}",
        f"--nproc-per-node={topology.gpus_per_node}",
        f"--node-rank={rank}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={_endpoint(topology.master_addr, topology.rdzv_port)}",
        f"--rdzv-id={topology.run_id}",
        f"--rdzv-conf=timeout={topology.join_timeout_s}",
        f"--local-addr={topology.node_ips[rank]}",
        "--max-restarts=0",
    ]


def node_command(command: list[str], topology: Topology, rank: int, launcher: str) -> list[str]:
    """The argv node `rank` runs (it becomes shell text through shlex.join)."""
    if launcher == "none":
        _check_rank(topology, rank)
        return list(command)
    if launcher != "torchrun":
        raise UsageError(f"--launcher {launcher!r}: expected torchrun or none")
    first = PurePosixPath(command[0]).name if command else ""
    python = bool(_PYTHON.fullmatch(first))
    if first in ("torchrun", "accelerate", "deepspeed") or (
        python and _module_of(command) == "torch.distributed.run"
    ):
        raise UsageError(
            f"CMD starts its own launcher ({first or command[:3]}): give --launcher none, and"
            " orch exports ORCH_NODE_RANK, MASTER_ADDR, ... for it"
        )
    options = torchrun_options(topology, rank)
    if not python:
        return ["torchrun", *options, "--no-python", *command]
    if len(command) < 2:
        raise UsageError("CMD is a Python interpreter without a script or -m MODULE")
    launch = [command[0], "-m", "torch.distributed.run", *options]
    if command[1] != "-m" and command[1].startswith("-"):
        # The interpreter's own options (`python -u train.py`): torchrun's parser knows none
        # of them ("unrecognized arguments: -u") and starts its workers as `python -u SCRIPT`,
        # so each worker runs CMD itself, as written (torchrun --no-python).
        return [*launch, "--no-python", *command]
    return [*launch, *command[1:]]


# The interpreter's options that take the next argument as their value (python(1): "-W arg",
# "-X option", "--check-hash-based-pycs mode"); `-c`, `-m`, `-` and a script end its options.
_PYTHON_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")


def _module_of(command: list[str]) -> str | None:
    """The module a Python command runs with `-m` after the interpreter's options, if any."""
    index = 1
    while index < len(command) and command[index].startswith("-"):
        arg = command[index]
        if arg == "-m":
            return command[index + 1] if index + 1 < len(command) else None
        if arg in ("-", "-c", "--"):
            return None
        index += 2 if arg in _PYTHON_VALUE_OPTIONS else 1
    return None


def reserved_env_clash(env: dict[str, str], topology: Topology, launcher: str) -> str | None:
    """A name the user set with --env that orch sets for every node, or None."""
    names = NODE_ENV + (MASTER_ENV if launcher == "none" and topology.num_nodes > 1 else ())
    return next((name for name in names if name in env), None)


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_rank(topology: Topology, rank: int) -> None:
    if not 0 <= rank < topology.num_nodes:
        raise UsageError(f"node rank {rank} is outside 0..{topology.num_nodes - 1}")
