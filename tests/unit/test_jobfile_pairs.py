"""Rules that join two of orch.yaml's keys, either of which a typed flag may give instead: one
model source, checkpoint.dir with checkpoint.store, recovery.fallback_on_demand with
recovery.spot, box.subnet_id with resources.cloud. They were judged only by the code behind the
flags, so a file that broke one was refused with flags the user did not type
(`--checkpoint-dir and --store go together`), no file and no line; a subnet id with
`cloud: aliyun` passed the loader and was refused only once `orch up` had asked for the
caller's address. Now the rule is judged where the file's values meet the typed flags
(jobfile/command.py's command_defaults): `orch.yaml:LINE: key: reason` at the key the file
gave, naming the other key (and its line) or the typed flag; the flag's own message when both
halves were typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.click_group import cli
from orchestrator.errors import UsageError
from orchestrator.provision import inputs
from orchestrator.run import session
from tests.support import Tripwire, forbid_cloud_reach, run_cli

CIDR = "203.0.113.7/32"
SUBNET = "subnet-0123456789abcdef0"
ALIYUN_NO_SUBNET = (
    "a subnet id is not supported for Aliyun boxes yet (each Aliyun box gets its own VPC and"
    " vSwitch)"
)


@pytest.fixture
def here(here: Path) -> Path:
    """The shared job folder (conftest.py), with a small Hugging Face config in it."""
    tmp_path = here
    (tmp_path / "config.json").write_text(
        '{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 256,'
        ' "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 512}'
    )
    return tmp_path


def merged(here: Path, text: str, command: str, *argv: str) -> dict[str, Any]:
    """The default_map `command` gets from `text` as orch.yaml, with `argv` typed."""
    (here / "orch.yaml").write_text(text)
    found = cli.get_command(click_context(), command)
    assert found is not None
    return dict(found.make_context(command, list(argv)).default_map or {})


def click_context() -> Any:
    import click

    return click.Context(cli)


def merge_refusal(here: Path, text: str, command: str, *argv: str) -> str:
    with pytest.raises(UsageError) as caught:
        merged(here, text, command, *argv)
    assert caught.value.exit_code == 2
    line = caught.value.one_line()
    assert "\n" not in line
    return line


def _tripwire(*_args: Any, **_kwargs: Any) -> None:
    raise Tripwire("reached the run")


def cli_refusal(capsys: Any, monkeypatch: Any, *argv: str) -> str:
    """`orch ARGV` exits 2 with one line, before any cloud, Terraform or run call."""
    forbid_cloud_reach(monkeypatch)
    monkeypatch.setattr(session, "Run", _tripwire)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("orch: error: "), err
    return err.removeprefix("orch: error: ").rstrip("\n")


UP = ("up", "--name", "x", "--yes")
RUN = ("run", "--yes", "--", "true")


# --- one model source -------------------------------------------------------------------


TWO_SOURCES = "job:\n  batch: 8\nmodel: bert-large\nhf_config: config.json\n"


def test_two_model_sources_in_the_file_name_the_second_and_the_first_s_line(here):
    assert merge_refusal(here, TWO_SOURCES, "plan") == (
        "orch.yaml:4: hf_config: give only one model source: model (line 3) is given too"
    )
    text = "params_m: 350\nmodel: bert-large\n"
    assert merge_refusal(here, text, "up") == (
        "orch.yaml:2: model: give only one model source: params_m (line 1) is given too"
    )


def test_two_model_sources_in_the_file_are_refused_by_plan_up_and_run(here, capsys, monkeypatch):
    (here / "orch.yaml").write_text(TWO_SOURCES)
    for argv in (("plan",), UP, RUN):
        assert cli_refusal(capsys, monkeypatch, *argv) == (
            "orch.yaml:4: hf_config: give only one model source: model (line 3) is given too"
        ), argv


def test_model_sources_typed_keep_the_flag_message_or_replace_the_file_s(here, capsys):
    (here / "orch.yaml").write_text("job:\n  epochs: 1\n")
    code, _, err = run_cli(capsys, "plan", "--model", "bert-large", "--params-m", "350")
    assert code == 2 and err == (
        "orch: error: give only one model source, not --model and --params-m\n"
    )
    # One typed source replaces both of the file's: nothing conflicts.
    assert "model" not in merged(here, TWO_SOURCES, "plan", "--params-m", "350")
    (here / "orch.yaml").write_text(TWO_SOURCES)
    assert run_cli(capsys, "plan", "--model", "bert-large")[0] == 0
    # `--plan` (and a pool, --box) drops the file's model: its sources do not matter.
    assert "model" not in merged(here, TWO_SOURCES, "run", "--plan", "p.json", "--", "true")


# --- checkpoint.dir with checkpoint.store ---------------------------------------------


HEAD = "model: bert-large\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "checkpoint:\n  dir: ck\n",
            "orch.yaml:3: checkpoint.dir: goes with checkpoint.store (or --store),"
            " which is not given",
        ),
        (
            "checkpoint:\n  interval: 1m\n  store: s3://bkt/ck\n",
            "orch.yaml:4: checkpoint.store: goes with checkpoint.dir (or --checkpoint-dir),"
            " which is not given",
        ),
    ],
)
def test_half_a_checkpoint_in_the_file_names_its_line(here, capsys, monkeypatch, text, message):
    assert merge_refusal(here, HEAD + text, "run", "--", "true") == message
    assert cli_refusal(capsys, monkeypatch, *RUN) == message


def test_a_typed_half_completes_the_file_s_checkpoint_or_keeps_its_message(
    here, capsys, monkeypatch
):
    seen: list[Any] = []
    monkeypatch.setattr(session, "Run", lambda request, *_: (seen.append(request), _tripwire()))
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    (here / "orch.yaml").write_text(HEAD + "checkpoint:\n  dir: ck\n")
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes", "--store", "s3://bkt/ck", "--", "true")
    (here / "orch.yaml").write_text(HEAD + "checkpoint:\n  store: s3://bkt/ck\n")
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes", "--checkpoint-dir", "ck", "--", "true")
    assert [(r.spec.checkpoint_dir, r.spec.store.url) for r in seen] == [("ck", "s3://bkt/ck")] * 2
    # Only the flag given, the file has neither: the flag's message, as without a file.
    (here / "orch.yaml").write_text(HEAD)
    typed = ("run", "--yes", "--checkpoint-dir", "ck", "--", "true")
    assert cli_refusal(capsys, monkeypatch, *typed) == "--checkpoint-dir and --store go together"


# --- recovery.fallback_on_demand with recovery.spot -------------------------------------


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        (
            "recovery:\n  fallback_on_demand: true\n",
            (),
            "orch.yaml:3: recovery.fallback_on_demand: goes with recovery.spot N"
            " (or --spot-recovery N), which is not given",
        ),
        (
            "recovery:\n  fallback_on_demand: true\n  spot: 0\n",
            (),
            "orch.yaml:3: recovery.fallback_on_demand: goes with recovery.spot N,"
            " which is 0 (line 4)",
        ),
        (
            "recovery:\n  fallback_on_demand: true\n  spot: 2\n",
            ("--spot-recovery", "0"),
            "orch.yaml:3: recovery.fallback_on_demand: goes with --spot-recovery N, which is 0",
        ),
        (
            "recovery:\n  watch_interval: 10s\n  spot: 0\n",
            ("--fallback-on-demand",),
            "orch.yaml:4: recovery.spot: --fallback-on-demand goes with spot recovery of 1 or"
            " more, not 0",
        ),
    ],
)
def test_fallback_without_spot_recovery_names_the_file_s_line(
    here, capsys, monkeypatch, text, argv, message
):
    assert merge_refusal(here, HEAD + text, "run", *argv, "--", "true") == message
    assert cli_refusal(capsys, monkeypatch, "run", "--yes", *argv, "--", "true") == message


def test_fallback_with_spot_recovery_from_either_side_runs(here, capsys, monkeypatch):
    seen: list[Any] = []
    monkeypatch.setattr(session, "Run", lambda request, *_: (seen.append(request), _tripwire()))
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    for text, argv in [
        ("recovery:\n  fallback_on_demand: true\n  spot: 2\n", ()),
        ("recovery:\n  fallback_on_demand: true\n", ("--spot-recovery", "2")),
        ("recovery:\n  spot: 2\n", ("--fallback-on-demand",)),
        ("recovery:\n  fallback_on_demand: true\n  spot: 0\n", ("--spot-recovery", "2")),
    ]:
        (here / "orch.yaml").write_text(HEAD + text)
        with pytest.raises(Tripwire):
            run_cli(capsys, "run", "--yes", "--spot", *argv, "--", "true")
    assert [(r.spot_recovery, r.fallback_on_demand) for r in seen] == [(2, True)] * 4
    # On an existing box (--box), run does not judge the pair: nor does the file's merge.
    (here / "orch.yaml").write_text(HEAD + "recovery:\n  fallback_on_demand: true\n")
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--box", "exp-1", "--", "true")
    # Both typed (the file holds neither): the flag's message.
    assert cli_refusal(capsys, monkeypatch, "run", "--yes", "--fallback-on-demand", "--", "t") == (
        "--fallback-on-demand goes with --spot-recovery N"
    )


# --- box.subnet_id with resources.cloud ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        (
            f"resources:\n  cloud: aliyun\nbox:\n  subnet_id: {SUBNET}\n",
            (),
            f"orch.yaml:5: box.subnet_id: resources.cloud is aliyun (line 3): {ALIYUN_NO_SUBNET}",
        ),
        (
            f"box:\n  subnet_id: {SUBNET}\n",
            ("--cloud", "aliyun"),
            f"orch.yaml:3: box.subnet_id: --cloud is aliyun: {ALIYUN_NO_SUBNET}",
        ),
        (
            "resources:\n  cloud: aliyun\n",
            ("--subnet-id", SUBNET),
            f"orch.yaml:3: resources.cloud: aliyun, with --subnet-id: {ALIYUN_NO_SUBNET}",
        ),
    ],
)
def test_a_subnet_id_for_aliyun_is_refused_before_any_cloud_call(
    here, capsys, monkeypatch, text, argv, message
):
    for command, *rest in (("up", "--name", "x"), ("run", "--")):
        args = (*argv, *rest) if command == "up" else (*argv, "--", "true")
        assert merge_refusal(here, HEAD + text, command, *args) == message, command
    assert cli_refusal(capsys, monkeypatch, *UP, *argv) == message
    assert cli_refusal(capsys, monkeypatch, "run", "--yes", *argv, "--", "true") == message
    assert not (here / "home" / "boxes").exists()


def test_a_subnet_id_with_a_cloud_that_takes_it_passes(here, capsys, monkeypatch):
    seen: list[Any] = []
    monkeypatch.setattr(session, "Run", lambda request, *_: (seen.append(request), _tripwire()))
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    for text, argv in [
        (f"resources:\n  cloud: aws\nbox:\n  subnet_id: {SUBNET}\n", ()),
        (f"box:\n  subnet_id: {SUBNET}\n", ("--cloud", "aws")),
        ("resources:\n  cloud: aws\n", ("--subnet-id", SUBNET)),
        # --cloud typed replaces the file's aliyun.
        (f"resources:\n  cloud: aliyun\nbox:\n  subnet_id: {SUBNET}\n", ("--cloud", "aws")),
        # --subnet-id's own refusal of a bad id stays the flag's (no cloud takes it).
        ("resources:\n  cloud: aws\n", ()),
    ]:
        (here / "orch.yaml").write_text(HEAD + text)
        with pytest.raises(Tripwire):  # a subnet is in one region (test_up_subnet.py)
            run_cli(capsys, "run", "--yes", "--region", "us-east-1", *argv, "--", "true")
    assert [r.up_options.subnet_id for r in seen] == [SUBNET] * 4 + [None]
    assert {r.up_options.plan.choice.cloud for r in seen} == {"aws"}
    (here / "orch.yaml").write_text(HEAD + "resources:\n  cloud: aliyun\n")
    # An id no cloud takes is the typed flag's fault: its own message, as without a file.
    line = cli_refusal(capsys, monkeypatch, *RUN[:2], "--subnet-id", "nope", *RUN[2:])
    assert line == ALIYUN_NO_SUBNET.replace("a subnet id", "--subnet-id", 1)
    # Both typed: the flag's message, before any cloud call.
    (here / "orch.yaml").write_text(HEAD)
    line = cli_refusal(capsys, monkeypatch, *UP, "--cloud", "aliyun", "--subnet-id", SUBNET)
    assert line == ALIYUN_NO_SUBNET.replace("a subnet id", "--subnet-id", 1)
