"""End-to-end fixtures: a moto server, the Terraform provider mirror, and an orch runner.

Reusable by every e2e suite:

    moto_backend       session: URL of a `moto_server` on a free loopback port
    moto_server        session: the URL tests use: that moto behind `capacity_proxy`
    tf_mirror          session: the provider filesystem mirror (ORCH_TEST_TF_MIRROR or a
                       standard place), with hashicorp/aws in it
    tf_cli_config      session: a CLI config file that installs hashicorp/aws from the mirror
    plugin_cache       session: one TF_PLUGIN_CACHE_DIR shared by every Terraform run
    aws_env            function: environment for `orch` against moto (own ORCH_HOME per test)
    orch               function: orch(*args, env=None) -> CompletedProcess of
                       `python -m orchestrator ...` (env defaults to aws_env)
    orch_process       function: orch_process(*args, env=None) -> Popen (for signals)
    ec2, ssm, s3       function: boto3 clients pointed at moto
    capacity_proxy     session: an HTTP proxy in front of moto that answers RunInstances for
                       chosen instance types with an EC2 capacity/quota error (moto itself
                       never runs out of capacity), or lets a zone launch N instances and
                       refuse the rest, makes S3 conditional writes atomic, and, inside a
                       test's `private_ips_on_loopback` block, gives every instance a
                       private address on this machine's loopback
    s3_atomic_url      session: that proxy's URL, for AWS_ENDPOINT_URL in tests that race
                       S3 conditional writes (moto alone lets two of them both succeed)

Helpers for fixtures of other scopes: moto_server_process(log_dir) (a context manager
yielding a moto URL) and CapacityProxy(upstream) (a context manager).

Every prerequisite goes through tests.support.require: skipped locally, fatal under CI=true.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.ports import free_port, listens
from tests.sim.ec2_placement import PlacementGroups
from tests.support import require

REPO = Path(__file__).resolve().parents[2]
AWS_PROVIDER = "registry.terraform.io/hashicorp/aws"
MIRROR_PLACES = (
    "/opt/tf-plugins",
    "~/.terraform.d/plugins",
    "~/.local/share/terraform/plugins",
    "/usr/local/share/terraform/plugins",
    "/usr/share/terraform/plugins",
)
REGION = "us-east-1"
# An image moto serves by default (MOTO_EC2_LOAD_DEFAULT_AMIS), so plans can name it by id.
MOTO_AMI = "ami-1e749f67"


# ------------------------------------------------------------------------------ mirror


def find_mirror(provider: str = AWS_PROVIDER) -> Path | None:
    """A filesystem mirror holding `provider` (host/namespace/type), or None."""
    places = [os.environ.get("ORCH_TEST_TF_MIRROR", ""), *MIRROR_PLACES]
    for place in places:
        if not place:
            continue
        root = Path(place).expanduser()
        if any((root / provider).glob("*/*/terraform-provider-*")):
            return root
    return None


def write_cli_config(path: Path, mirrors: dict[str, list[str]]) -> Path:
    """A Terraform CLI config installing the given providers from their mirrors only.

    `mirrors` maps a mirror directory to provider addresses ("registry.terraform.io/x/y");
    everything else would come from the network (never used by the tests).
    """
    blocks = []
    every = [p for providers in mirrors.values() for p in providers]
    for root, providers in mirrors.items():
        include = ", ".join(f'"{p}"' for p in providers)
        blocks.append(
            f'  filesystem_mirror {{\n    path    = "{root}"\n    include = [{include}]\n  }}'
        )
    exclude = ", ".join(f'"{p}"' for p in every)
    blocks.append(f"  direct {{\n    exclude = [{exclude}]\n  }}")
    path.write_text("provider_installation {\n" + "\n".join(blocks) + "\n}\n")
    return path


@pytest.fixture(scope="session")
def tf_mirror() -> Path:
    mirror = find_mirror()
    require(mirror, f"a Terraform provider mirror with {AWS_PROVIDER} (set ORCH_TEST_TF_MIRROR)")
    assert mirror is not None
    return mirror


@pytest.fixture(scope="session")
def tf_cli_config(tmp_path_factory: pytest.TempPathFactory, tf_mirror: Path) -> Path:
    path = tmp_path_factory.mktemp("tfcli") / "terraform.rc"
    return write_cli_config(path, {str(tf_mirror): [AWS_PROVIDER]})


@pytest.fixture(scope="session")
def plugin_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plugin-cache")


# ------------------------------------------------------------------------------ moto


def moto_server_binary() -> str | None:
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    return shutil.which("moto_server")


MOTO_START_ATTEMPTS = 5


def serving(process: subprocess.Popen, port: int, url: str, timeout: float = 60.0) -> bool:
    """Wait until `process` answers at `url` as the one listening on `port` (tests/ports.py:
    another worker's server may have taken the port first); False when it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return listens(process.pid, port)
        except OSError:
            time.sleep(0.2)
    return False


@contextlib.contextmanager
def moto_server_process(log_dir: Path) -> Iterator[str]:
    """Run a `moto_server` on a free loopback port (its log in `log_dir`); yields its URL.

    For fixtures of any scope: the session's `moto_server`, or a module's own server.
    """
    binary = moto_server_binary()
    require(binary, "moto_server (pip install 'moto[server]')")
    assert binary is not None
    log = log_dir / "moto.log"
    for _ in range(MOTO_START_ATTEMPTS):
        port = free_port()
        with open(log, "ab") as sink:
            process = subprocess.Popen(
                [binary, "-p", str(port), "-H", "127.0.0.1"],
                # AWS's managed policies exist in every real account (a box's role attaches
                # AmazonSSMManagedInstanceCore); moto loads them only when asked.
                env={**os.environ, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"},
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        url = f"http://127.0.0.1:{port}"
        if serving(process, port, f"{url}/moto-api/data.json"):
            break
        stop_process(process)
    else:
        pytest.fail(f"moto_server did not start: {log.read_text()[-2000:]}")
    try:
        yield url
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def moto_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's moto_server itself; tests reach it through `moto_server` (the proxy)."""
    with moto_server_process(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture(scope="session")
def moto_server(capacity_proxy: CapacityProxy) -> str:
    """URL of the session's moto, behind the capacity proxy: it adds what moto lacks and orch
    asks for (placement groups, tests/sim/ec2_placement.py: `orch down` and `orch sweep` list
    them), and refuses launches only inside a test's `refusing`/`running_out` block."""
    return capacity_proxy.url


# ------------------------------------------------------------------------------ env + runner


def aws_environment(endpoint: str, cli_config: Path, cache: Path, home: Path) -> dict[str, str]:
    """Environment for `orch` (and boto3) against an emulator: standard variables only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "TF_", "ORCH_")) or k == "ORCH_TERRAFORM"
    }
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_PLUGIN_CACHE_DIR=str(cache),
        ORCH_HOME=str(home),
        ORCH_OWNER="e2e@orch-tests",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def aws_env(
    moto_server: str, tf_cli_config: Path, plugin_cache: Path, tmp_path: Path
) -> dict[str, str]:
    return aws_environment(moto_server, tf_cli_config, plugin_cache, tmp_path / "orch-home")


def orch_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def run_orch(
    args: list[str], env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        orch_argv(args),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def orch(aws_env: dict[str, str]):  # noqa: ANN201 - a callable
    """orch(*args, env=None, timeout=600) -> CompletedProcess, with aws_env by default."""

    def call(
        *args: str, env: dict[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return run_orch(list(args), env or aws_env, timeout=timeout)

    return call


@pytest.fixture
def orch_process(aws_env: dict[str, str]):  # noqa: ANN201 - a callable
    """orch_process(*args, env=None) -> Popen with text pipes, for signals mid-run."""

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            orch_argv(list(args)),
            env=env or aws_env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


@pytest.fixture
def moto_ami() -> str:
    return MOTO_AMI


def moto_client(service: str, aws_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    """A boto3 client of `service` talking to the session's moto server."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=aws_env["AWS_ENDPOINT_URL"],
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def ec2(aws_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    return moto_client("ec2", aws_env)


@pytest.fixture
def ssm(aws_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    return moto_client("ssm", aws_env)


@pytest.fixture
def s3(aws_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    return moto_client("s3", aws_env)


# ------------------------------------------------------------------------------ capacity proxy

EC2_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>{request}</RequestID></Response>"
)


class CapacityProxy:
    """Forward every request to moto, except RunInstances for `refuse` instance types
    (or "type@zone": the type in that availability zone only).

    Those get EC2's own error shape for `code` (400, like VcpuLimitExceeded), which is what
    a real account without quota or capacity for the type answers.

    S3 writes of one object (PUT, DELETE, and any request with If-Match / If-None-Match) are
    forwarded one at a time, so conditional writes are atomic as on S3. S3 evaluates the
    condition and the write as one step: of concurrent conditional writes to a key only one
    succeeds, the others get 412 PreconditionFailed (or 409 ConditionalRequestConflict).
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
    moto's server checks the condition, then writes, with no lock, on a thread per request:
    two conditional PUTs of one key can both succeed there, which S3 never allows.
    """

    def __init__(self, upstream: str):
        self.upstream = urlparse(upstream)
        # Public SSM parameters (name -> value) answered here: moto refuses to create names
        # under /aws/ and ships no DLAMI parameters (see `ssm_answer`).
        self.ssm_parameters: dict[str, str] = {}
        self.refuse: dict[str, str] = {}  # instance type -> error code
        self.refused: list[str] = []
        # A zone that runs out after some launches: (zone, launches allowed, code).
        self.run_out: tuple[str, int, str] | None = None
        self.launched: dict[str, int] = {}  # zone -> RunInstances forwarded while run_out
        self._launch_guard = threading.Lock()
        self.spot_reclaimed: set[str] = set()  # instance ids the "spot service" took back
        self.loopback_private = False  # see private_ips_on_loopback
        self._object_locks: dict[str, threading.Lock] = {}  # "host path" -> lock (S3 writes)
        self._object_locks_guard = threading.Lock()
        self.placement = PlacementGroups(REGION)  # what moto lacks (tests/sim/ec2_placement.py)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without TCP_NODELAY the body waits for
            # the client's delayed ACK (~20-40 ms a request).
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                body = self._body()
                ssm = proxy.ssm_answer(self.headers.get("X-Amz-Target") or "", body)
                if ssm is not None:
                    status, payload = ssm
                    headers = {"Content-Type": "application/x-amz-json-1.1"}
                    self._send(status, headers, json.dumps(payload).encode())
                    return
                refusal = proxy.refusal(body)
                if refusal is not None:
                    self._send(400, {"Content-Type": "text/xml"}, refusal)
                    return
                form = ec2_form(body)
                answer = proxy.placement.answer(form) or proxy.placement.refuse_launch(form)
                if answer is not None:  # placement groups: moto has none (tests/sim)
                    self._send(answer[0], {"Content-Type": "text/xml"}, answer[1])
                    return
                with proxy.object_lock(self.command, self.path, self.headers):
                    upstream = http.client.HTTPConnection(
                        proxy.upstream.hostname, proxy.upstream.port, timeout=60
                    )
                    skip_in = ("connection", "transfer-encoding", "content-length")
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in skip_in}
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                skip = ("transfer-encoding", "connection", "content-length")
                kept = {k: v for k, v in response.getheaders() if k.lower() not in skip}
                if response.status == 200:
                    proxy.placement.record(form, data)
                self._send(response.status, kept, proxy.rewrite(body, data))
                upstream.close()

            def _body(self) -> bytes:
                """The request body, by Content-Length or chunk by chunk (forwarded whole:
                http.client sets its length)."""
                if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)

            def _send(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        return Handler

    def object_lock(
        self, method: str, path: str, headers: Any
    ) -> contextlib.AbstractContextManager[object]:
        """The lock of the S3 object a write names, held while it is forwarded (see the class
        docstring); a no-op context for reads and EC2/SSM calls (POST to "/")."""
        conditional = "If-Match" in headers or "If-None-Match" in headers
        if not (method in ("PUT", "DELETE") or (conditional and method == "POST")):
            return contextlib.nullcontext()
        # Path style (/bucket/key) or virtual-hosted (bucket.host/key): the host tells them apart.
        name = f"{headers.get('Host', '')} {urlparse(path).path}"
        with self._object_locks_guard:
            return self._object_locks.setdefault(name, threading.Lock())

    def ssm_answer(self, target: str, body: bytes) -> tuple[int, dict[str, Any]] | None:
        """SSM GetParametersByPath / GetParameter / GetParameters for `ssm_parameters`, in the
        API's JSON shapes (MaxResults at most 10 a page, NextToken; a missing name is 400
        ParameterNotFound), or None to relay to moto. By path: every parameter under Path
        (Recursive), or one level below it.
        https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParametersByPath.html
        https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html"""
        if not self.ssm_parameters or not target.startswith("AmazonSSM."):
            return None
        request = json.loads(body or b"{}")
        action = target.removeprefix("AmazonSSM.")
        if action == "GetParameter" and request.get("Name") in self.ssm_parameters:
            return 200, {"Parameter": self._ssm_parameter(request["Name"])}
        if action == "GetParameters":
            names = request.get("Names") or []
            if any(name in self.ssm_parameters for name in names):
                found = [self._ssm_parameter(n) for n in names if n in self.ssm_parameters]
                missing = [n for n in names if n not in self.ssm_parameters]
                return 200, {"Parameters": found, "InvalidParameters": missing}
        if action != "GetParametersByPath":
            return None
        path = str(request.get("Path", "")).rstrip("/") + "/"
        names = sorted(
            name
            for name in self.ssm_parameters
            if name.startswith(path) and (request.get("Recursive") or "/" not in name[len(path) :])
        )
        size = int(request.get("MaxResults") or 10)
        if not 1 <= size <= 10:
            return 400, {"__type": "ValidationException", "message": "MaxResults is 1 to 10"}
        start = int(request.get("NextToken") or 0)
        page = {"Parameters": [self._ssm_parameter(n) for n in names[start : start + size]]}
        if start + size < len(names):
            page["NextToken"] = str(start + size)
        return 200, page

    def _ssm_parameter(self, name: str) -> dict[str, Any]:
        return {
            "Name": name,
            "Type": "String",
            "Value": self.ssm_parameters[name],
            "Version": 1,
            "LastModifiedDate": 1764547200.0,
            "ARN": f"arn:aws:ssm:us-east-1::parameter{name}",
            "DataType": "aws:ec2:image",
        }

    def rewrite(self, body: bytes, data: bytes) -> bytes:
        """DescribeInstances: instances in `spot_reclaimed` carry the StateReason EC2 gives a
        reclaimed spot instance (moto can only terminate as the user does), and members of a
        placement group its name (tests/sim/ec2_placement.py). DescribeLaunchTemplateVersions:
        without the template's own tags in its data (`template_data_as_ec2`). Any EC2 answer
        inside `private_ips_on_loopback`: private addresses on the loopback."""
        if self.loopback_private and ec2_form(body):
            data = loopback_private_ips(data)
        if b"Action=DescribeLaunchTemplateVersions" in body:
            return template_data_as_ec2(data)
        if b"Action=DescribeInstances" not in body:
            return data
        data = self.placement.placed(data)
        if not self.spot_reclaimed:
            return data
        return reclaimed_state_reason(data, self.spot_reclaimed)

    def refusal(self, body: bytes) -> bytes | None:
        if b"Action=RunInstances" not in body:
            return None
        form = parse_qs(body.decode("utf-8", "replace"))
        instance_type = (form.get("InstanceType") or [""])[0]
        # "type@zone" refuses the type in that availability zone only.
        zone = (form.get("Placement.AvailabilityZone") or [""])[0]
        key = f"{instance_type}@{zone}"
        code = self._run_out_code(zone)
        if code is None:
            key = key if key in self.refuse else instance_type
            code = self.refuse.get(key)
        if code is None:
            return None
        self.refused.append(key)
        message = f"You have requested more vCPU capacity than allowed for {instance_type}."
        return EC2_ERROR.format(code=code, message=message, request="orch-test").encode()

    def _run_out_code(self, zone: str) -> str | None:
        """The code for a launch in a zone that has run out (the launches allowed there are
        used up), else None and the launch counts. Calls race (Terraform creates a cluster's
        nodes in parallel): one lock, so exactly `allowed` of them pass."""
        if self.run_out is None or zone != self.run_out[0]:
            return None
        with self._launch_guard:
            if self.launched.get(zone, 0) >= self.run_out[1]:
                return self.run_out[2]
            self.launched[zone] = self.launched.get(zone, 0) + 1
            return None

    @contextlib.contextmanager
    def running_out(self, zone: str, after: int, code: str) -> Iterator[CapacityProxy]:
        """Within the block, zone `zone` launches `after` instances, then refuses every other
        RunInstances with `code` (a node of a cluster past the zone's capacity fails, and so
        does the provider's retry of it)."""
        self.run_out, self.launched, self.refused = (zone, after, code), {}, []
        try:
            yield self
        finally:
            self.run_out = None

    @contextlib.contextmanager
    def refusing(self, refuse: dict[str, str]) -> Iterator[CapacityProxy]:
        """Within the block, RunInstances for these types fails with the given code."""
        self.refuse, self.refused = dict(refuse), []
        try:
            yield self
        finally:
            self.refuse = {}

    @contextlib.contextmanager
    def private_ips_on_loopback(self) -> Iterator[CapacityProxy]:
        """Within the block, every private IPv4 address in an EC2 answer is on this machine's
        loopback (`loopback_private_ips`), in every answer alike (RunInstances,
        DescribeInstances, network interfaces): what Terraform records and orch reads as a
        node's private address is one a loopback "node" can listen on and reach, so torchrun's
        rendezvous at rank 0's private address and each node's --local-addr are real (moto's
        10.x / 172.31.x addresses are nowhere). Off again after it: the proxy serves the
        whole session."""
        self.loopback_private = True
        try:
            yield self
        finally:
            self.loopback_private = False

    def __enter__(self) -> CapacityProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def ec2_form(body: bytes) -> dict[str, list[str]]:
    """An EC2 Query API request's parameters; {} for anything else (S3 bodies, JSON)."""
    if not body.startswith(b"Action=") and b"&Action=" not in body:
        return {}
    return parse_qs(body.decode("utf-8", "replace"))


PRIVATE_IPV4 = re.compile(
    rb"<privateIpAddress>\d{1,3}\.(\d{1,3}\.\d{1,3}\.\d{1,3})</privateIpAddress>"
)


def loopback_private_ips(data: bytes) -> bytes:
    """Every <privateIpAddress>A.B.C.D</privateIpAddress> (the element EC2's Query API answers
    an instance's, an interface's and an address's private IPv4 address in) as 127.B.C.D.
    Linux routes all of 127.0.0.0/8 to lo, so each is an address of this machine; moto gives
    the instances of one subnet distinct addresses (one /8: 10.x or the default VPC's
    172.31.x), so they stay distinct."""
    return PRIVATE_IPV4.sub(rb"<privateIpAddress>127.\1</privateIpAddress>", data)


# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StateReason.html
SPOT_TERMINATION = "Server.SpotInstanceTermination"


def reclaimed_state_reason(data: bytes, instance_ids: set[str]) -> bytes:
    """Set stateReason of these instances (in a DescribeInstances answer) to a spot reclaim."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(data)
    namespace = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
    ET.register_namespace("", namespace.strip("{}"))
    for item in root.iter(f"{namespace}item"):
        instance_id = item.findtext(f"{namespace}instanceId")
        if instance_id not in instance_ids:
            continue
        reason = item.find(f"{namespace}stateReason")
        if reason is None:
            reason = ET.SubElement(item, f"{namespace}stateReason")
        for child in list(reason):
            reason.remove(child)
        ET.SubElement(reason, f"{namespace}code").text = SPOT_TERMINATION
        ET.SubElement(
            reason, f"{namespace}message"
        ).text = f"{SPOT_TERMINATION}: Spot instance termination"
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


def template_data_as_ec2(data: bytes) -> bytes:
    """moto 5.2 copies CreateLaunchTemplate's TagSpecifications (the template's own tags,
    resource type launch-template) into version 1's LaunchTemplateData; EC2 keeps them apart
    ("To tag the launch template, the resource type must be launch-template", while the data's
    TagSpecifications tag "resources that are created during instance launch",
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateLaunchTemplate.html,
    .../API_LaunchTemplateTagSpecificationRequest.html). Left in, the provider sees a
    tag_specifications block the module never set, plans to update the template, and with it
    every node's launch_template version: a plan that replaces the nodes."""
    own = rb"<item><resourceType>launch-template</resourceType><tagSet>.*?</tagSet></item>"
    return re.sub(own, b"", data, flags=re.S)


@pytest.fixture(scope="session")
def capacity_proxy(moto_backend: str) -> Iterator[CapacityProxy]:
    with CapacityProxy(moto_backend) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def s3_atomic_url(capacity_proxy: CapacityProxy) -> str:
    """An endpoint (AWS_ENDPOINT_URL) where S3 conditional writes are atomic as on AWS."""
    return capacity_proxy.url


@pytest.fixture
def iam(aws_env: dict[str, str]):  # noqa: ANN201 - a boto3 client
    return moto_client("iam", aws_env)
