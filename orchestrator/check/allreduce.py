"""Run the all_reduce probe across a cluster's nodes with torchrun (`orch check CLUSTER`).

Each node gets the same POSIX-shell script on ssh's stdin (never in an argv): it writes the
probe (allreduce_probe.py) to a temporary file and starts

    torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d
             --rdzv-endpoint RANK0_PRIVATE_IP:PORT --rdzv-id ID ...

PyTorch's own launcher and rendezvous (c10d, hosted by node 0: `is_host` says which node
serves the store rather than letting torchrun guess from addresses). Every value in the
script is made here (numbers, validated IP addresses, a random id, a fixed backend name) and
quoted anyway; nothing a user typed reaches it. The box's output is bounded: the script
keeps torchrun's output in a file and prints only the probe's result line, which network
NCCL used, and on failure the log's tail.
"""

from __future__ import annotations

import json
import secrets
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from orchestrator.check import busbw
from orchestrator.check.ports import free_ports
from orchestrator.check.transport import CommandResult, SshTransport
from orchestrator.check.untrusted import printable
from orchestrator.errors import OrchError

PROBE = Path(__file__).with_name("allreduce_probe.py")
RESULT_MARK = "ORCH-ALLREDUCE "
NETWORK_MARK = "ORCH-NET "
DEFAULT_PORT = 29400  # torchrun's c10d default, when node 0 cannot name a free port
DEFAULT_SIZE_MIB = 256
ITERS = 20
WARMUP = 5
EXIT_NO_TORCH = 127
_HEREDOC_END = "ORCH_ALLREDUCE_PROBE_END"


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    backend: str  # "nccl" (GPUs) or "gloo" (CPUs: tests, diagnosis)
    size_bytes: int
    gpus_per_node: int  # processes per node
    timeout_s: float  # the whole launch, rendezvous included

    def __post_init__(self) -> None:
        if self.backend not in ("nccl", "gloo"):
            raise OrchError(f"unknown all_reduce backend {self.backend!r}")
        if not 4 <= self.size_bytes <= busbw.MAX_BYTES or not 1 <= self.gpus_per_node <= 64:
            raise OrchError("all_reduce size or processes per node out of range")


@dataclass(frozen=True, slots=True)
class NodeLaunch:
    index: int
    transport: SshTransport
    local_addr: str | None  # the node's private address, for --local-addr


def launch_script(
    node: NodeLaunch, nodes: int, endpoint: str, run_id: str, settings: ProbeSettings
) -> str:
    """The shell script node `node.index` runs (it arrives on stdin)."""
    probe = PROBE.read_text()
    if _HEREDOC_END in probe:
        raise OrchError("the all_reduce probe contains its own heredoc delimiter")
    limit = max(10, int(settings.timeout_s))
    rdzv_conf = f"is_host={1 if node.index == 0 else 0},join_timeout={limit}"
    torchrun_args = [
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(settings.gpus_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        rdzv_conf,
        "--max-restarts",
        "0",
        *(["--local-addr", node.local_addr] if node.local_addr else []),
    ]
    probe_args = [
        "--backend",
        settings.backend,
        "--bytes",
        str(settings.size_bytes),
        "--iters",
        str(ITERS),
        "--warmup",
        str(WARMUP),
        "--timeout",
        str(limit),
    ]
    quoted = shlex.join(torchrun_args)
    return f"""set -u
work=$(mktemp -d "${{TMPDIR:-/tmp}}/orch-allreduce.XXXXXX") || exit 70
trap 'rm -rf "$work"' EXIT
cat > "$work/probe.py" <<'{_HEREDOC_END}'
{probe}
{_HEREDOC_END}
if command -v torchrun >/dev/null 2>&1; then launcher=torchrun
elif python3 -c 'import torch' >/dev/null 2>&1; then launcher='python3 -m torch.distributed.run'
else echo 'torchrun not found and python3 cannot import torch' >&2; exit {EXIT_NO_TORCH}; fi
if command -v timeout >/dev/null 2>&1; then bound='timeout -k 5 {limit + 30}'; else bound=; fi
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET $bound $launcher {quoted} "$work/probe.py" \
  {shlex.join(probe_args)} > "$work/log" 2>&1
status=$?
grep -a '^{RESULT_MARK}' "$work/log" | head -n 1
grep -ao 'Using network [A-Za-z0-9_ -]*' "$work/log" | sort -u | head -n 3 \
  | sed 's/^Using network /{NETWORK_MARK}/'
if [ "$status" -ne 0 ]; then tail -c 3000 "$work/log" >&2; fi
exit "$status"
"""


@dataclass(slots=True)
class NodeOutcome:
    index: int
    exit_code: int | None  # None: the node did not answer
    stdout: str = ""
    problem: str = ""  # one line, escaped


# Asked of every node before the launch, so that a node without torch is named at once
# instead of leaving the others waiting in the rendezvous until its timeout.
_HAS_TORCH = (
    "command -v torchrun >/dev/null 2>&1 || python3 -c 'import torch' >/dev/null 2>&1 || "
    f"{{ echo 'torchrun not found and python3 cannot import torch' >&2; exit {EXIT_NO_TORCH}; }}"
)


def preflight(launches: list[NodeLaunch], timeout: float) -> list[NodeOutcome]:
    """The nodes that cannot run the probe (no torch, no answer), each with why."""
    with ThreadPoolExecutor(max_workers=len(launches)) as pool:
        futures = [pool.submit(_run_on, n, _HAS_TORCH, min(timeout, 60.0)) for n in launches]
        return [o for o in (f.result() for f in futures) if o.exit_code != 0]


def _run_on(node: NodeLaunch, script: str, timeout: float) -> NodeOutcome:
    try:
        result: CommandResult = node.transport.run(script, timeout=timeout, on_stdin=True)
    except OrchError as exc:
        return NodeOutcome(node.index, None, problem=printable(exc.message, 300))
    problem = ""
    if result.exit_code != 0:
        problem = _failure_line(result)
    return NodeOutcome(node.index, result.exit_code, result.stdout, problem)


def _failure_line(result: CommandResult) -> str:
    if result.exit_code == EXIT_NO_TORCH:
        return "torchrun not found and python3 cannot import torch"
    if result.exit_code == 124:
        return "the all_reduce did not finish in time (a node never joined the rendezvous?)"
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    shown = (errors or lines or ["no output"])[-1]
    return f"exit {result.exit_code}: {printable(shown, 300)}"


@dataclass(slots=True)
class AllreduceRun:
    outcomes: list[NodeOutcome]
    measurement: busbw.Measurement | None
    problem: str = ""  # why there is no measurement

    def to_dict(self) -> dict[str, object]:
        return {
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "problem": self.problem or None,
            "nodes": [
                {"index": o.index, "exit_code": o.exit_code, "problem": o.problem or None}
                for o in self.outcomes
            ],
        }


def run_allreduce(
    launches: list[NodeLaunch], rendezvous_ip: str, settings: ProbeSettings
) -> AllreduceRun:
    """Start the probe on every node at once; the result line comes from global rank 0,
    wherever the rendezvous put it."""
    unable = preflight(launches, settings.timeout_s)
    if unable:
        named = "; ".join(f"node {o.index}: {o.problem or 'failed'}" for o in unable)
        return AllreduceRun(unable, None, f"the all_reduce cannot start ({named})")
    # A port nothing listens on, named by node 0 (check/ports.py); the default when it cannot say.
    (port,) = free_ports(launches[0].transport, 1, settings.timeout_s) or (DEFAULT_PORT,)
    endpoint = f"[{rendezvous_ip}]:{port}" if ":" in rendezvous_ip else f"{rendezvous_ip}:{port}"
    run_id = f"orch-check-{secrets.token_hex(6)}"
    scripts = [launch_script(n, len(launches), endpoint, run_id, settings) for n in launches]
    wait = settings.timeout_s + 60
    with ThreadPoolExecutor(max_workers=len(launches)) as pool:
        futures = [pool.submit(_run_on, n, s, wait) for n, s in zip(launches, scripts, strict=True)]
        outcomes = [future.result() for future in futures]
    return _collect(outcomes)


def _collect(outcomes: list[NodeOutcome]) -> AllreduceRun:
    failed = [o for o in outcomes if o.exit_code != 0]
    if failed:
        named = "; ".join(f"node {o.index}: {o.problem or 'failed'}" for o in failed)
        return AllreduceRun(outcomes, None, f"the all_reduce failed ({named})")
    network = None
    result = None
    for outcome in outcomes:
        for line in outcome.stdout.splitlines():
            if line.startswith(RESULT_MARK) and result is None:
                result = line[len(RESULT_MARK) :]
            elif line.startswith(NETWORK_MARK) and network is None:
                network = printable(line[len(NETWORK_MARK) :].strip(), 60)
    if result is None:
        return AllreduceRun(outcomes, None, "no node printed the all_reduce result")
    try:
        measurement = busbw.measurement_from(json.loads(result), network)
    except ValueError:
        return AllreduceRun(outcomes, None, "the all_reduce result is not JSON")
    except OrchError as exc:
        return AllreduceRun(outcomes, None, exc.message)
    return AllreduceRun(outcomes, measurement)
