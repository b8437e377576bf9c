"""The Cloud seam's rules: clouds are reached through the registry only, the import graph has
no circle and no upward import, and the registry / sweeper behave as documented."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import clouds
from orchestrator.clouds import base, registry, values
from orchestrator.clouds.base import ErrorKind, NoCredentials
from orchestrator.clouds.values import TaggedResource
from orchestrator.errors import OrchError, UsageError
from orchestrator.sweep import sweep

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "orchestrator"
CLOUD_NAME = re.compile(r"[\"'](aws|aliyun)[\"']")
MAX_FILES_NAMING_A_CLOUD = 2

# Layers, bottom first: a module may import its own layer or lower ones only. Cloud packages
# sit above the catalog (their images read catalog rows) and below everything that uses them.
LAYERS: list[tuple[str, ...]] = [
    (
        "orchestrator.errors",
        "orchestrator.durations",
        "orchestrator.resources",
        "orchestrator.textui",
        "orchestrator.jsontext",
    ),
    ("orchestrator.clouds.base", "orchestrator.clouds"),
    ("orchestrator.catalog",),
    ("orchestrator.clouds.aws", "orchestrator.clouds.aliyun"),
    ("orchestrator.sizing", "orchestrator.plan", "orchestrator.plan_validate"),
    (
        "orchestrator.provision",
        "orchestrator.check",
        # Code that runs on the box, and the files orch ships with it (the clouds' metadata).
        "orchestrator.boxside",
    ),
    # CI runners: they add a user-data section to a launch request and read box records, so
    # they sit above provision, which never asks for them (issue 19 item 3: `down` gets a
    # `forget_runner` callback instead).
    ("orchestrator.ci_runner",),
    # A job on a box, a pool of boxes, and the sweeper (which reads pool records): they use
    # provision, check and the clouds.
    ("orchestrator.run", "orchestrator.pool", "orchestrator.sweep", "orchestrator.doctor"),
    # The job file is the command line's other spelling: its layout is built from the
    # commands' `Option` declarations, and its click command class serves plan/up/run.
    ("orchestrator.commands", "orchestrator.jobfile"),
    ("orchestrator.cli", "orchestrator.click_group", "orchestrator.__main__", "orchestrator"),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """orchestrator module -> the orchestrator modules it imports (anywhere in its code)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from orchestrator import clouds` imports orchestrator.clouds, not the top.
                subs = {f"{node.module}.{alias.name}" for alias in node.names} & set(modules)
                found.update(subs or {node.module})
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def layer_of(module: str) -> int:
    best, rank = -1, len(LAYERS)
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_at_most_two_files_outside_clouds_name_a_cloud():
    naming = sorted(
        str(p.relative_to(REPO))
        for p in PACKAGE.rglob("*.py")
        if not p.is_relative_to(PACKAGE / "clouds") and CLOUD_NAME.search(p.read_text())
    )
    assert len(naming) <= MAX_FILES_NAMING_A_CLOUD, naming


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_graph_has_no_circle():
    assert cycles(import_graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    graph = import_graph()
    assert all(layer_of(m) < len(LAYERS) for m in graph), "every module has a layer"
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(source)
    )
    assert upward == []


def test_clouds_base_imports_only_the_standard_library_and_errors():
    tree = ast.parse((PACKAGE / "clouds" / "base.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    ours = {m for m in imported if m.startswith("orchestrator")}
    assert ours <= {"orchestrator.errors"}


def test_built_in_clouds_satisfy_the_protocol_and_classify_their_failover_codes():
    assert clouds.names()[:2] == ("aws", "aliyun")
    for cloud in clouds.all_clouds():
        assert isinstance(cloud, clouds.Cloud)
        assert cloud.module_dir().is_dir() and (cloud.templates_dir() / "main.tf.j2").is_file()
        assert {"instance_id", "public_ip", "private_ip", "ssh_user"} <= set(cloud.outputs())
        for code in cloud.failover_codes():
            assert cloud.error_kind(code).fails_over, (cloud.name, code)
        assert cloud.error_kind("DependencyViolation") is ErrorKind.RETRYABLE
        assert cloud.error_kind("UnauthorizedOperation") is ErrorKind.PERMANENT


def test_registering_and_resolving_clouds_loads_no_sdk():
    code = (
        "import sys\n"
        "from orchestrator import clouds\n"
        "for cloud in clouds.all_clouds():\n"
        "    cloud.failover_codes(), cloud.outputs(), cloud.module_dir()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('boto', 'alibabacloud'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_unknown_cloud_names_the_registered_ones():
    with pytest.raises(UsageError, match=r"unknown cloud 'gcp' \(expected one of aws, aliyun"):
        clouds.get("gcp")


def test_a_bad_plugin_reference_is_a_usage_error(monkeypatch):
    monkeypatch.setenv(registry.PLUGINS_ENV, "no-colon-here")
    with pytest.raises(UsageError, match="is not module:attr"):
        clouds.names()
    monkeypatch.setenv(registry.PLUGINS_ENV, "tests.nothing_here:Cloud")
    with pytest.raises(OrchError, match="tests.nothing_here is missing"):
        clouds.names()


class MemoryCloud:
    """Just enough of a Cloud for the sweeper: resources kept in a list."""

    name = "memory"
    title = "Memory"
    reserved_tag_prefixes: tuple[str, ...] = ()

    def __init__(self, resources: list[TaggedResource], fail: Exception | None = None):
        self.resources = resources
        self.fail = fail
        self.no_credentials = False

    def catalog_file(self) -> None:
        return None

    def list_tagged(self, region: str, box: str | None = None) -> list[TaggedResource]:
        if self.no_credentials:
            raise NoCredentials("no memory credentials found")
        return [r for r in self.resources if box is None or r.box == box]

    def delete_tagged(self, region: str, resources: list[TaggedResource]) -> None:
        if self.fail:
            raise self.fail
        self.resources = [r for r in self.resources if r not in resources]


@pytest.fixture
def memory(monkeypatch):
    cloud = MemoryCloud(
        [
            TaggedResource(
                "instance",
                "m-1",
                "big",
                {"orch:box": "old", "orch:expires-at": "2020-01-01T00:00:00Z"},
            ),  # noqa: E501
            TaggedResource(
                "instance",
                "m-2",
                "big",
                {"orch:box": "new", "orch:expires-at": "2099-01-01T00:00:00Z"},
            ),  # noqa: E501
        ]
    )
    clouds.register("memory", cloud)
    yield cloud
    registry.unregister("memory")


NOW = datetime(2026, 12, 3, tzinfo=UTC)


def test_sweep_destroys_expired_boxes_then_asks_the_cloud_again(memory, capsys):
    report = sweep(["memory"], ["r1"], now=NOW)
    assert [(g.box, g.action) for g in report.groups] == [("new", "kept"), ("old", "destroyed")]
    assert [r.id for r in memory.resources] == ["m-2"]
    assert capsys.readouterr() == ("", "")  # the library reports, the command prints


def test_sweep_reports_a_failed_delete_as_a_value(memory, capsys):
    memory.fail = base.CloudError("busy", code="DependencyViolation")
    report = sweep(["memory"], ["r1"], now=NOW)
    [failed] = report.failed
    assert failed.box == "old" and failed.error == "busy"
    assert capsys.readouterr() == ("", "")


def test_sweep_skips_a_cloud_without_credentials_named_or_not(memory):
    memory.no_credentials = True
    report = sweep(["memory"], ["r1"], now=NOW)
    assert report.skipped == {"memory": "no credentials (no memory credentials found)"}
    assert report.groups == [] and report.nothing_swept
    # Any other error is never taken for missing credentials, whatever its message says.
    memory.no_credentials = False
    memory.list_tagged = lambda region, box=None: (_ for _ in ()).throw(  # type: ignore[method-assign]
        base.CloudError("credentials expired for this region")
    )
    with pytest.raises(base.CloudError):
        sweep(["memory"], ["r1"], now=NOW)


def test_sweep_asks_the_cloud_s_credential_check_before_listing(memory):
    from orchestrator.clouds.values import Credentials

    memory.credentials = lambda: Credentials(False, problem="none", hint="set MEMORY_KEY")
    memory.list_tagged = None  # never reached
    report = sweep(["memory"], ["r1"], now=NOW)
    assert report.skipped == {"memory": "no credentials (none; set MEMORY_KEY)"}
    assert report.nothing_swept and report.regions == {}


# ------------------------------------------------------------------------ check --via


@pytest.fixture
def faux_cloud():
    from tests.fixtures.clouds.faux import FauxCloud

    clouds.register("faux", FauxCloud())
    yield
    registry.unregister("faux")


def box_on(cloud: str, tmp_path: Path):
    from tests.unit.test_boxes import make_box

    box = make_box("exp1", cloud=cloud)
    box.directory = tmp_path / "exp1"
    return box


def test_an_agent_transport_comes_from_the_box_s_cloud(tmp_path, faux_cloud):
    from orchestrator.check.transport import transport_for_box, vias

    assert vias() == ("ssh", "ssm", "cloud-assistant", "faux-agent")
    assert type(transport_for_box(box_on("aws", tmp_path), via="ssm")).__name__ == "SsmTransport"
    agent = transport_for_box(box_on("faux", tmp_path), via="faux-agent")
    assert agent.run("true", 5).status == "Success"
    with pytest.raises(UsageError, match=r"--via ssm works only for AWS boxes \(use faux-agent"):
        transport_for_box(box_on("faux", tmp_path), via="ssm")
    with pytest.raises(
        UsageError, match=r"--via cloud-assistant works only for Aliyun boxes \(use ssm on AWS\)"
    ):
        transport_for_box(box_on("aws", tmp_path), via="cloud-assistant")
    with pytest.raises(UsageError, match="unknown transport 'telnet'"):
        transport_for_box(box_on("aws", tmp_path), via="telnet")


def test_optional_capabilities_are_protocols_checked_with_isinstance():
    """A cloud has an optional capability when it has the member (issue 19): the helpers ask
    isinstance, and a cloud without it gets the documented fallback."""

    class Bare:
        pass

    class Watching:
        ssh_key_type = "rsa"

        def instance_state(self, region: str, instance_id: str) -> values.InstanceState:
            return values.InstanceState("running")

    bare, watching = Bare(), Watching()
    assert not isinstance(bare, registry.WatchesInstances) and not isinstance(
        bare, registry.HasKeyType
    )
    assert isinstance(watching, registry.WatchesInstances) and isinstance(
        watching, registry.HasKeyType
    )
    assert registry.instance_state_of(bare, "r", "i-1") is None  # type: ignore[arg-type]
    assert registry.instance_state_of(watching, "r", "i-1") == values.InstanceState("running")  # type: ignore[arg-type]
    assert registry.ssh_key_type_of(bare) == "ed25519"  # type: ignore[arg-type]
    assert registry.ssh_key_type_of(watching) == "rsa"  # type: ignore[arg-type]
    assert registry.vcpu_quota_of(bare, "r", "p5.48xlarge", False) is None  # type: ignore[arg-type]
    assert registry.ssh_key_type_of(clouds.get("aliyun")) == "rsa"
    assert isinstance(clouds.get("aws"), registry.WatchesInstances)


def test_price_api_zone_stock_and_agent_are_optional_too(faux_cloud):
    """The three members that used to be mandatory and return None (issue 19 item 6): a cloud
    without them gets no price refresh, the module's choice of zone, and SSH alone."""
    from orchestrator.check.transport import vias
    from orchestrator.provision.failover import zones_to_try
    from tests import support

    class Bare:
        name = "bare"

    bare = Bare()
    assert registry.price_api_of(bare) is None  # type: ignore[arg-type]
    assert registry.zones_with_stock_of(bare, "r", "t", False) is None  # type: ignore[arg-type]
    assert registry.agent_via_of(bare) is None  # type: ignore[arg-type]
    candidate = support.candidate("g5.xlarge")  # any plan row: the bare cloud is asked
    assert zones_to_try(bare, candidate) == [None]  # type: ignore[arg-type]
    for cloud in (clouds.get("aws"), clouds.get("aliyun")):
        assert isinstance(cloud, registry.HasPriceApi) and isinstance(
            cloud, registry.KnowsZoneStock
        )
        assert registry.price_api_of(cloud) is not None
    assert [registry.agent_via_of(c) for c in clouds.all_clouds()] == [
        "ssm", "cloud-assistant", "faux-agent"
    ]  # fmt: skip
    faux = clouds.get("faux")  # a zone list and an agent, but no price API
    assert not isinstance(faux, registry.HasPriceApi) and registry.price_api_of(faux) is None
    assert registry.zones_with_stock_of(faux, "faux-1", "faux.small", False) == ["faux-1a"]
    assert "faux-agent" in vias()
