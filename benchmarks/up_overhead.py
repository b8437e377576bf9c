"""What `orch up` + `orch down` cost on top of Terraform itself.

Against a local moto server (behind the tests' proxy, which serves the placement groups moto
lacks and `orch down` asks for: tests/sim/ec2_placement.py), each repetition times
  orch:  `orch up --plan plan.json --name ... --no-check` then `orch down ...`
  raw:   `terraform init`, `apply -auto-approve`, `destroy -auto-approve` of the same rendered
         root module (same Terraform core, same provider, same plugin cache),
alternating the two so load on the machine affects both alike, then prints the medians and
orch's overhead in percent (target: at most 15 %).

    .venv/bin/python benchmarks/up_overhead.py [--repetitions 3] [--mirror DIR]

Needs moto_server (moto[server]) and a provider mirror holding hashicorp/aws (--mirror, or
$ORCH_TEST_TF_MIRROR, or a standard place such as /opt/tf-plugins). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.plan import Candidate, Plan, write_plan  # noqa: E402
from orchestrator.provision.render import RenderRequest, render_box  # noqa: E402
from orchestrator.provision.userdata import render_user_data  # noqa: E402
from tests.e2e.conftest import CapacityProxy, stop_process  # noqa: E402

PROVIDER = "registry.terraform.io/hashicorp/aws"
MIRRORS = ("/opt/tf-plugins", "~/.terraform.d/plugins", "/usr/share/terraform/plugins")
MOTO_AMI = "ami-1e749f67"
REGION = "us-east-1"
CIDR = "203.0.113.7/32"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB bench"


def find_mirror(explicit: str | None) -> Path:
    for place in (explicit, os.environ.get("ORCH_TEST_TF_MIRROR"), *MIRRORS):
        if place and any((Path(place).expanduser() / PROVIDER).glob("*/*/terraform-provider-*")):
            return Path(place).expanduser()
    sys.exit(f"no provider mirror with {PROVIDER}: pass --mirror")


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    binary = Path(sys.executable).parent / "moto_server"
    if not binary.exists():
        sys.exit("moto_server not found next to this Python (pip install 'moto[server]')")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [str(binary), "-p", str(port), "-H", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2).close()
            return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    sys.exit("moto_server did not start")


def candidate() -> Candidate:
    return Candidate(
        cloud="aws",
        region=REGION,
        instance_type="g4dn.xlarge",
        market="on-demand",
        gpu="T4",
        gpu_count=1,
        gpu_memory_gib=16.0,
        price_per_hour=0.526,
        samples_per_s=1.0,
        hours=1.0,
        cost=0.53,
        memory_per_gpu_bytes=1,
        memory_fraction=0.5,
        image={"id": MOTO_AMI},
        root_volume_gib=120,
        ssh_user="ubuntu",
    )


def moto_env(work: Path, mirror: Path, url: str) -> dict[str, str]:
    """Environment for orch and raw Terraform against moto at `url`: the provider from
    `mirror` only (a CLI config under `work`), one plugin cache, ORCH_HOME under `work`."""
    cli_config = work / "terraform.rc"
    cli_config.write_text(
        "provider_installation {\n"
        f'  filesystem_mirror {{\n    path    = "{mirror}"\n'
        f'    include = ["{PROVIDER}"]\n  }}\n'
        f'  direct {{\n    exclude = ["{PROVIDER}"]\n  }}\n}}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_", "ORCH_"))}
    env.update(
        AWS_ENDPOINT_URL=url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_PLUGIN_CACHE_DIR=str(work / "plugin-cache"),
        ORCH_HOME=str(work / "home"),
    )
    (work / "plugin-cache").mkdir(exist_ok=True)
    return env


def render_template(directory: Path, chosen: Candidate, name: str = "bench-raw") -> Path:
    """The root module orch renders for `chosen`, for raw Terraform to apply."""
    render_box(
        directory,
        RenderRequest(
            name=name,
            owner="bench",
            candidate=chosen,
            ssh_public_key=KEY,
            ssh_ingress_cidrs=[CIDR],
            user_data=render_user_data(None, "aws"),
        ),
    )
    return directory


def raw_env(env: dict[str, str]) -> dict[str, str]:
    # orch sets this itself when AWS_ENDPOINT_URL is set; raw Terraform is told directly.
    return {**env, "TF_VAR_aws_skip_checks": "true", "TF_IN_AUTOMATION": "1"}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv[:6])}... failed:\n{result.stderr[-2000:]}")
    return elapsed


def orch_round(n: int, plan: Path, env: dict[str, str]) -> float:
    orch = [sys.executable, "-m", "orchestrator"]
    name = f"bench-orch-{n}"
    up = [*orch, "up", "--plan", str(plan), "--name", name, "--ssh-cidr", CIDR, "--no-check"]
    return timed(up, env, REPO) + timed([*orch, "down", name], env, REPO)


def raw_round(n: int, template: Path, work: Path, env: dict[str, str]) -> float:
    directory = work / f"raw-{n}"
    shutil.copytree(template, directory)
    tf = [sys.executable, "-m", "orchestrator.provision.libtf_exec"]
    tf_env = raw_env(env)
    return (
        timed([*tf, "init", "-input=false"], tf_env, directory)
        + timed([*tf, "apply", "-auto-approve", "-input=false"], tf_env, directory)
        + timed([*tf, "destroy", "-auto-approve", "-input=false"], tf_env, directory)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--mirror")
    args = parser.parse_args()
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    mirror = find_mirror(args.mirror)
    moto, url = start_moto()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    try:
        with CapacityProxy(url) as proxy:  # moto has no placement groups; `down` asks for them
            env = moto_env(work, mirror, proxy.url)
            plan = work / "plan.json"
            write_plan(Plan({}, {}, candidate(), [], "2026-12-02T19:00:00Z"), plan)
            template = render_template(work / "template", candidate())
            orch_times, raw_times = [], []
            for n in range(args.repetitions):
                raw_times.append(raw_round(n, template, work, env))
                orch_times.append(orch_round(n, plan, env))
                print(f"rep {n + 1}: orch up+down {orch_times[-1]:6.2f}s   "
                      f"terraform init+apply+destroy {raw_times[-1]:6.2f}s",
                      flush=True)  # fmt: skip
        orch_median, raw_median = statistics.median(orch_times), statistics.median(raw_times)
        overhead = (orch_median / raw_median - 1) * 100
        print(
            json.dumps(
                {
                    "repetitions": args.repetitions,
                    "orch_up_down_median_s": round(orch_median, 2),
                    "terraform_median_s": round(raw_median, 2),
                    "overhead_percent": round(overhead, 1),
                    "target_percent": 15,
                }
            )
        )
    finally:
        stop_process(moto)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
