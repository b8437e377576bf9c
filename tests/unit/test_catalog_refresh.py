"""The user price overlay: how `orch catalog refresh` results are merged over shipped prices.

No network here: overlays are written with the same code `orch catalog refresh` uses
(orchestrator.catalog.overlay), into a private XDG_DATA_HOME. The refresh command against the
Aliyun emulator is tested in tests/e2e/aliyun/test_catalog_refresh.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.catalog import find_instance, load_instances, loader
from orchestrator.catalog import overlay as ov
from orchestrator.catalog.schema import Price
from orchestrator.errors import OrchError

REPO = Path(__file__).resolve().parents[2]
PRICED = "ecs.gn6i-c4g1.xlarge"  # shipped with a cn-hangzhou on-demand price
UNPRICED = "ecs.gn6e-c12g1.6xlarge"  # shipped without any price (in no price list found)
API = "Alibaba Cloud DescribePrice API (region {})"


@pytest.fixture
def data_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loader.clear_cache()
    yield home
    loader.clear_cache()


def entry(on_demand: float | None, spot: float | None = None, region: str = "cn-hangzhou"):
    return ov.OverlayEntry(Price(on_demand, spot), "2026-12-01", API.format(region))


def write(overlay: ov.Overlay) -> Path:
    path = ov.write_overlay("aliyun", overlay, "2026-12-01")
    loader.clear_cache()
    return path


def test_overlay_lives_under_xdg_data_home(data_home, monkeypatch):
    assert ov.overlay_path("aliyun") == data_home / "orch" / "prices" / "aliyun.toml"
    monkeypatch.delenv("XDG_DATA_HOME")
    expected = Path.home() / ".local" / "share" / "orch" / "prices" / "aliyun.toml"
    assert ov.overlay_path("aliyun") == expected


def test_without_an_overlay_the_shipped_prices_stand(data_home):
    assert ov.read_overlay("aliyun") == {}
    shipped = find_instance("aliyun", PRICED)
    assert shipped.prices == {"cn-hangzhou": Price(1.615, None)}
    assert "NOT RE-VERIFIED" in shipped.price_source.note


def test_overlay_replaces_and_adds_prices_and_names_its_source(data_home):
    before = {row.name: row for row in load_instances("aliyun")}
    path = write(
        {
            PRICED: {"cn-hangzhou": entry(1.17, 0.351)},
            UNPRICED: {
                "cn-hangzhou": entry(1.83, 0.549),
                "cn-shanghai": entry(1.9, None, "cn-shanghai"),
            },
            "ecs.not-in-the-catalog": {"cn-hangzhou": entry(9.0)},
        }
    )
    after = {row.name: row for row in load_instances("aliyun")}

    assert after[PRICED].prices == {"cn-hangzhou": Price(1.17, 0.351)}
    assert after[UNPRICED].prices == {
        "cn-hangzhou": Price(1.83, 0.549),
        "cn-shanghai": Price(1.9, None),
    }
    assert after[UNPRICED].price("cn-shanghai", spot=True) is None
    source = after[UNPRICED].price_source
    assert source.url.startswith("https://www.alibabacloud.com/") and "describeprice" in source.url
    assert source.date == "2026-12-01"
    assert API.format("cn-hangzhou") in source.note and API.format("cn-shanghai") in source.note
    assert str(path) in source.note
    # Everything the overlay does not name is exactly as shipped, including specs.
    for name, row in before.items():
        if name not in (PRICED, UNPRICED):
            assert after[name] == row
    assert after[PRICED].vcpus == before[PRICED].vcpus
    assert len(after) == len(before)  # an overlay type unknown to the catalog adds nothing


def test_regions_missing_from_the_overlay_keep_the_shipped_price(data_home):
    write({PRICED: {"cn-shanghai": entry(1.3, region="cn-shanghai")}})
    row = find_instance("aliyun", PRICED)
    assert row.prices == {"cn-hangzhou": Price(1.615, None), "cn-shanghai": Price(1.3, None)}
    assert "cn-hangzhou: shipped catalog prices" in row.price_source.note


def test_an_overlay_for_another_cloud_leaves_aliyun_alone(data_home):
    path = ov.overlay_path("aws")
    path.parent.mkdir(parents=True)
    path.write_text('cloud = "aws"\n[prices."g5.xlarge"]\n"us-east-1" = { on_demand = 0.5, '
                    'date = "2026-12-01", source = "hand-made" }\n')  # fmt: skip
    loader.clear_cache()
    assert find_instance("aws", "g5.xlarge").price("us-east-1") == 0.5
    assert find_instance("aliyun", PRICED).price("cn-hangzhou") == 1.615


def test_render_then_read_round_trips(data_home):
    odd = ov.OverlayEntry(Price(1.83, 0.5), "2026-12-01", 'a "quoted" source', ("spot",))
    overlay = {
        UNPRICED: {"cn-hangzhou": odd},
        PRICED: {"ap-southeast-1": entry(2.0, 0.6, "ap-southeast-1")},
    }
    write(overlay)
    assert ov.read_overlay("aliyun") == overlay


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("cloud = [", "not valid TOML"),
        ('cloud = "aws"', "is for cloud 'aws'"),
        ('[prices."x"]\n"r" = { on_demand = -1.0, date = "2026-12-01" }', "positive number"),
        ('[prices."x"]\n"r" = { on_demand = true, date = "2026-12-01" }', "positive number"),
        ('[prices."x"]\n"r" = { date = "2026-12-01" }', "no price"),
        ('[prices."x"]\n"r" = { on_demand = 1.0, date = "yesterday" }', "not an ISO date"),
        ('[prices."x"]\n"r" = { on_demand = 1.0, date = "2026-12-01", kept = ["x"] }', "kept"),
        ('[prices."x"]\n"r" = { on_demand = 1.0, date = "2026-12-01", kept = [[1]] }', "kept"),
        ("prices = 3", "must be a table"),
    ],
)
def test_a_broken_overlay_is_a_clear_error(data_home, text, complaint):
    path = ov.overlay_path("aliyun")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    loader.clear_cache()
    with pytest.raises(OrchError) as caught:
        load_instances("aliyun")
    message = caught.value.one_line()
    assert complaint in message and str(path) in message and "delete" in message
    assert caught.value.exit_code == 1


def test_an_edited_overlay_is_read_again(data_home):
    write({UNPRICED: {"cn-hangzhou": entry(1.0)}})
    assert find_instance("aliyun", UNPRICED).price("cn-hangzhou") == 1.0
    write({UNPRICED: {"cn-hangzhou": entry(2.5)}})  # same size, new content
    assert find_instance("aliyun", UNPRICED).price("cn-hangzhou") == 2.5


# --------------------------------------------------------------------------- merge_refresh


def source(region: str) -> str:
    return API.format(region)


def test_merge_refresh_statuses_and_kept_figures():
    current = {
        "a": {"r1": Price(1.0, 0.3)},
        "b": {"r1": Price(2.0, None)},
        "c": {},
        "d": {"r1": Price(4.0, None)},
        "e": {"r1": Price(5.0, 1.5)},
    }
    old_overlay = {"z": {"r9": entry(7.0)}}
    fetched = {
        "a": {"r1": {"on_demand": 1.1, "spot": 0.3}},  # changed
        "b": {"r1": {"on_demand": 2.0, "spot": None}},  # unchanged
        "c": {"r1": {"on_demand": 3.0, "spot": 0.9}},  # new
        "d": {"r1": {"on_demand": None, "spot": None}},  # unavailable: nothing written
        "e": {"r1": {"on_demand": 5.5, "spot": None}},  # spot kept from the old figure
    }
    overlay, changes = ov.merge_refresh(
        old_overlay, current, fetched, date="2026-12-02", source_for_region=source
    )
    status = {c.instance_type: c.status for c in changes}
    assert status == {
        "a": "changed",
        "b": "unchanged",
        "c": "new",
        "d": "unavailable",
        "e": "changed",
    }
    assert set(overlay) == {"a", "b", "c", "e", "z"}  # d untouched; earlier entries stay
    assert overlay["z"] == old_overlay["z"]
    assert overlay["e"]["r1"] == ov.OverlayEntry(
        Price(5.5, 1.5), "2026-12-02", source("r1"), ("spot",)
    )
    assert overlay["c"]["r1"].price == Price(3.0, 0.9) and overlay["c"]["r1"].kept == ()
    (d,) = [c for c in changes if c.instance_type == "d"]
    assert d.old == d.new == Price(4.0, None)
    assert old_overlay == {"z": {"r9": entry(7.0)}}  # the input is not modified
    a = next(c for c in changes if c.instance_type == "a").to_dict()
    assert a["old"] == {"on_demand": 1.0, "spot": 0.3} and a["new"]["on_demand"] == 1.1


# ------------------------------------------------------------------------------ the CLI


def orch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_CLOUD_", "XDG_"))}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    return env


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # AWS is refreshed too now (issue 10); its bad input still stops before any call.
        (["--cloud", "aws", "--region", "US East!"], "is not a region id"),
        (["--cloud", "aws", "--type", "p5.48xlarg"], "did you mean"),
        (["--cloud", "aliyun", "--region", "Hangzhou!"], "is not a region id"),
        (["--cloud", "aliyun", "--type", "ecs.gn7i-c8g1.2xlarg"], "did you mean"),
        (["--cloud", "gcp"], "Invalid value for '--cloud'"),
    ],
)
def test_refresh_usage_errors_exit_2_before_any_call(cli_env, args, says):
    result = orch("catalog", "refresh", *args, env=cli_env)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert not (Path(cli_env["XDG_DATA_HOME"]) / "orch").exists()


def test_offline_catalog_commands_load_no_sdk_and_no_parser(cli_env):
    """`orch catalog gpus/instances` (with or without an overlay, once the parse cache is warm)
    import neither a cloud SDK nor tomllib."""
    code = (
        "import sys\n"
        "from orchestrator.click_group import cli\n"
        "for args in (['catalog', 'gpus'], ['catalog', 'instances', '--cloud', 'aliyun']):\n"
        "    cli.main(args=args, standalone_mode=False)\n"
        "bad = [m for m in sys.modules if m.startswith(('alibabacloud', 'boto', 'tomllib'))]\n"
        "bad += [m for m in ('orchestrator.clouds.aliyun',) if m in sys.modules]\n"
        "print('LOADED', sorted(bad))\n"
    )

    def loaded() -> str:
        out = subprocess.run(
            [sys.executable, "-c", code], env=cli_env, cwd=REPO, capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        return out.stdout.strip().splitlines()[-1]

    loaded()  # warm the parse cache
    assert loaded() == "LOADED []"
    path = Path(cli_env["XDG_DATA_HOME"]) / "orch" / "prices" / "aliyun.toml"
    path.parent.mkdir(parents=True)
    path.write_text(
        ov.render_overlay("aliyun", {UNPRICED: {"cn-hangzhou": entry(0.9)}}, "2026-12-01")
    )
    loaded()  # first read of the overlay parses it
    assert loaded() == "LOADED []"
    table = orch("catalog", "instances", "--cloud", "aliyun", "--gpu", "V100-32GB", env=cli_env)
    (line,) = [row for row in table.stdout.splitlines() if f" {UNPRICED} " in row]
    assert " 0.900 " in line and "cn-hangzhou" in line


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_fetched_price_that_is_not_positive_keeps_the_old_figure(data_home, bad):
    """A price API's 0 (DescribePrice's TradePrice after a full discount) or junk is not
    written: the overlay's reader refuses it, and every later plan would stop there."""
    current = {"a": {"r1": Price(1.0, 0.3)}}
    fetched = {"a": {"r1": {"on_demand": bad, "spot": 0.25}}}
    overlay, changes = ov.merge_refresh(
        {}, current, fetched, date="2026-12-02", source_for_region=source
    )
    assert overlay["a"]["r1"].price == Price(1.0, 0.25)
    assert overlay["a"]["r1"].kept == ("on_demand",)
    ov.write_overlay("aliyun", overlay, "2026-12-02")
    assert ov.read_overlay("aliyun")["a"]["r1"].price == Price(1.0, 0.25)
    fetched = {"a": {"r1": {"on_demand": bad, "spot": None}}}
    _, changes = ov.merge_refresh({}, current, fetched, date="2026-12-02", source_for_region=source)
    assert [c.status for c in changes] == ["unavailable"]
