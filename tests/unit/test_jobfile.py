"""Issue 23 item 1: the job file orch.yaml. The real CLI runs in-process in a temporary working
directory; where `up`/`run` would reach a cloud, a tripwire keeps what they would have used."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.jobfile.example import EXAMPLE
from orchestrator.provision import inputs, launch
from tests.support import (
    Tripwire,
    candidate,
    cli_refused,
    plan_file,
    run_cli,
)

REPO = Path(__file__).resolve().parents[2]
CIDR = "203.0.113.7/32"


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def test_the_example_is_current_valid_and_plans(here, capsys):
    assert (REPO / "examples" / "orch.yaml").read_text() == EXAMPLE
    code, out, _ = run_cli(capsys, "init")
    assert code == 0 and (here / "orch.yaml").read_text() == EXAMPLE
    plan = plan_json(capsys)  # ./orch.yaml, found by itself
    assert plan["job"]["model"] == "bert-large" and plan["job"]["epochs"] == 3
    assert plan["source"]["sha256"] and plan["source"]["job_file"] == str(here / "orch.yaml")
    code, _, err = run_cli(capsys, "init")
    assert code == 2 and "exists" in err and len(err.strip().splitlines()) == 1
    assert run_cli(capsys, "init", "--force")[0] == 0


def test_init_elsewhere_names_the_command_that_reads_it(here, capsys):
    """`orch init -f FILE` says which command plans it, whole and quoted for a shell, as
    its --help example does (`then orch plan -f jobs/bert.yaml`)."""
    code, out, _ = run_cli(capsys, "init", "-f", "jobs/my bert.yaml")
    assert code == 0, out
    assert "then `orch plan -f 'jobs/my bert.yaml'`" in out, out


def test_the_readme_s_job_file_plans_within_its_own_limits(here, capsys):
    """The orch.yaml the README shows is the one users copy first: it validates and finds a
    box within its own max_price and deadline (a catalog or model change that breaks this
    must change the README too)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## The job file, `orch.yaml`", 1)[1].split("```yaml\n", 1)[1]
    write(here / "orch.yaml", block.split("```", 1)[0])
    plan = plan_json(capsys)
    choice = plan["choice"]
    assert choice["market"] == "spot" and choice["price_per_hour"] <= 2.0
    assert choice["hours"] <= 8
    assert plan["job"]["lora_rank"] == 16 and plan["job"]["model"] == "llama-3-8b"


def test_flags_override_the_file_and_file_gpus_filter(here, capsys):
    write(here / "orch.yaml", "model: bert-large\njob:\n  batch: 16\nresources:\n  gpus: 4\n")
    plan = plan_json(capsys)
    assert plan["job"]["batch"] == 16
    assert {c["gpu_count"] for c in [plan["choice"], *plan["alternatives"]]} == {4}
    plan = plan_json(capsys, "--batch", "32", "--gpus", "1")
    assert plan["job"]["batch"] == 32 and plan["choice"]["gpu_count"] == 1
    # A model source on the command line replaces the file's (no "give one of" conflict).
    assert plan_json(capsys, "--params-m", "350")["job"]["model"] is None


def test_a_length_on_the_command_line_replaces_the_files_other_form(here, capsys):
    """--samples replaces the file's epochs/dataset_size (and the reverse), as a model source
    does: no "both set the job's length" conflict naming a flag nobody typed."""
    write(here / "orch.yaml", "model: bert-large\njob:\n  epochs: 3\n  dataset_size: 1000\n")
    plan = plan_json(capsys, "--samples", "500")
    assert (plan["job"]["samples"], plan["job"]["epochs"], plan["job"]["dataset_size"]) == (
        500,
        None,
        None,
    )
    assert plan_json(capsys, "--epochs", "2")["job"]["dataset_size"] == 1000  # the rest stays
    write(here / "orch.yaml", "model: bert-large\njob:\n  samples: 5000\n")
    plan = plan_json(capsys, "--epochs", "2", "--dataset-size", "100")
    assert plan["job"]["samples"] is None and plan["assumptions"]["samples"] == 200


def test_the_plan_records_file_and_git_revision(here, capsys):
    job = write(here / "job.yaml", "model: bert-large\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(here)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "job.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "job"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    code, _, err = run_cli(capsys, "plan", "-f", job, "-o", "plan.json")
    assert code == 0, err
    source = json.loads((here / "plan.json").read_text())["source"]
    import hashlib

    assert source["sha256"] == hashlib.sha256((here / "job.yaml").read_bytes()).hexdigest()
    assert source["git_commit"] == head.strip() and source["git_modified"] is False
    (here / "job.yaml").write_text("model: bert-large\njob:\n  batch: 4\n")
    assert plan_json(capsys, "-f", job)["source"]["git_modified"] is True


BAD_FILES = [
    # (file text, line, words)
    ("resorces:\n  cloud: aws\n", 1, ("resorces", "did you mean resources")),
    ("model: bert-large\nresources:\n  gpus: two\n", 3, ("resources.gpus", "integer")),
    ("model: bert-large\nbox:\n  ttl: ''\n", 3, ("box.ttl", "duration")),  # not "no expiry"
    ("model: bert-large\nbox:\n  ttl: 5 minutes\n", 3, ("box.ttl", "duration")),
    ("model: bert-large\njob:\n  precision: fp8\n", 3, ("job.precision", "fp8")),
    ("model: a\nmodel: b\n", 2, ("model", "twice")),
    ("job:\n  batch: [1\n", 3, ("not valid YAML",)),
    ("model: bert-large\nresources:\n  headroom: .nan\n", 3, ("resources.headroom", "finite")),
    ("model: bert-large\nresources:\n  max_price: -1\n", 3, ("resources.max_price",)),
    ("model: bert-large\njob:\n  epochs: 0\n", 3, ("job.epochs",)),
    ("model: bert-large\nresources:\n  deadline: 6\n", 3, ("resources.deadline",)),
    ("- model\n", 1, ("mapping",)),
    ("model: bert-large\nrun:\n  env: [lower-case]\n", 3, ("run.env[0]", "variable name")),
    ("model: bert-large\njob:\n  headroom: 0.5\n", 3, ("job.headroom", "unknown key")),
    # Ranges the flags get from sizing/resolve.py: these were `--batch must be at least 1`,
    # naming a flag that was not typed and neither the file nor the line.
    ("model: bert-large\njob:\n  batch: 0\n", 3, ("job.batch", "minimum of 1")),
    ("model: bert-large\njob:\n  image_size: 100000\n", 3, ("job.image_size", "16384")),
    ("model: bert-large\njob:\n  lora_dropout: 1\n", 3, ("job.lora_dropout", "maximum")),
    ("params_m: 0.5\n", 1, ("params_m", "minimum of 1")),
    ("model: bert-large\nresources:\n  gpus: 100000\n", 3, ("resources.gpus", "65536")),
    ("model: bert-large\njob:\n  cuda_context_gib: 99\n", 3, ("job.cuda_context_gib", "0 to 16")),
    # Rules the options get once parsed, where the schema cannot say them (a duration is
    # text): these named a flag that was not typed (`--ttl 40d is longer than 30 days`), and
    # `plan` let them through; a tag key with `=` was split into another tag.
    ("model: bert-large\nresources:\n  deadline: 0s\n", 3, ("resources.deadline", "zero")),
    ("model: bert-large\nbox:\n  ttl: 40d\n", 3, ("box.ttl: '40d' is not from 1m to 30d",)),
    ("model: bert-large\nbox:\n  ttl: 30s\n", 3, ("box.ttl", "from 1m")),
    ("model: bert-large\nbox:\n  check_timeout: 0s\n", 3, ("box.check_timeout", "1s to 1d")),
    ("model: bert-large\nbox:\n  check_timeout: 2d\n", 3, ("box.check_timeout", "1s to 1d")),
    ("model: bert-large\nrun:\n  rendezvous_timeout: 1s\n", 3, ("run.rendezvous_timeout",)),
    ("model: bert-large\ncheckpoint:\n  interval: 2d\n", 3, ("checkpoint.interval", "1d")),
    ("model: bert-large\nrecovery:\n  watch_interval: 2h\n", 3, ("recovery.watch_", "1h")),
    ("model: bert-large\nrecovery:\n  ssh_lost_after: 1s\n", 3, ("recovery.ssh_lost_after",)),
    ("model: bert-large\npool:\n  wait: 2d\n", 3, ("pool.wait: '2d' is not from 0s to 1d",)),
    ("model: bert-large\nrun:\n  env: [HOME, ORCH_RUN_ID]\n", 3, ("run.env[1]: orch sets",)),
    ("model: bert-large\nrun:\n  env: [_orch_x]\n", 3, ("run.env[0]", "orch's own")),
    ("model: bert-large\nbox:\n  tags: {a=b: c}\n", 3, ("box.tags.a=b", "'='")),
    ("model: bert-large\nbox:\n  tags:\n    ok: a\n    aws:x: b\n", 5, ("box.tags.aws:x",)),
    ("model: bert-large\nbox:\n  tags: {k: " + "v" * 257 + "}\n", 3, ("box.tags.k", "256")),
    (
        "model: bert-large\nbox:\n  tags: {" + ", ".join(f"k{i}: v" for i in range(31)) + "}\n",
        3,
        ("box.tags: more than 30 entries",),
    ),
    (
        "model: bert-large\nrun:\n  env: [" + ", ".join(f"V{i}" for i in range(101)) + "]\n",
        3,
        ("run.env: more than 100 entries",),
    ),
    # A value written where a name belongs was shown in the error (and so in CI logs).
    ("model: bert-large\nrun:\n  env: [HF_TOKEN=hf_s3cr3t]\n", 3, ("run.env[0]: not an",)),
    ("model: bert-large\nrun:\n  env: {HF_TOKEN: hf_s3cr3t}\n", 3, ("run.env: not a list",)),
    ("model: bert-large\nrun:\n  env: [{HF_TOKEN: hf_s3cr3t}]\n", 3, ("run.env[0]: not an",)),
    # A key that is not a string (the number 1, true, ~) was reported on line 1.
    ("model: bert-large\n1: 2\n", 2, ("[1]: unknown key",)),
    ("model: bert-large\n~: 2\n", 2, ("None: unknown key",)),
    ("model: bert-large\njob: {1: 2,\n  0x1: 3}\n", 3, ("job[1]: key given twice",)),
    # YAML can write a NUL byte, a command line cannot: these were ValueError tracebacks.
    ('hf_config: "a\\0b"\n', 1, ("hf_config: a NUL byte",)),
    ('model: bert-large\nrun:\n  workdir: "a\\0b"\n', 3, ("run.workdir: a NUL byte",)),
    ('model: bert-large\nbox:\n  tags: {"a\\0": b}\n', 3, ("box.tags.a\\x00: a NUL byte",)),
    # An alias inside its own anchor is a value without end (it was a RecursionError).
    ("model: bert-large\nrun:\n  fetch: &a [*a]\n", 3, ("run.fetch[0]", "own anchor")),
    # Aliases of aliases: seven lines that expand to a million values (walked for seconds; nine
    # levels instead of six were an hour).
    (
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 6))
        + "model: *a5\n",
        5,
        ("a4: more than 100,000 values with aliases expanded",),
    ),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_FILES)
def test_a_bad_file_is_one_line_naming_key_and_line(here, capsys, text, line, words):
    write(here / "orch.yaml", text)
    for argv in (["plan"], ["up", "--name", "x", "--ssh-cidr", CIDR]):
        code, out, err = run_cli(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(f"orch: error: orch.yaml:{line}: "), lines[0]
        for word in words:
            assert word in lines[0], lines[0]
        assert "s3cr3t" not in lines[0]
    assert not (here / "home" / "boxes").exists()


def test_a_file_nested_too_deeply_is_one_line(here, capsys):
    # PyYAML composes nested collections by recursion: 2,000 levels were a RecursionError.
    for opening, closing in (("[", "]"), ("{a: ", "}")):
        write(here / "orch.yaml", "model: " + opening * 2000 + "1" + closing * 2000 + "\n")
        cli_refused(capsys, "plan", words=("orch.yaml: not valid YAML: nested too deeply",))


def test_missing_or_odd_files_are_usage_errors(here, capsys):
    for argv, words in ((["-f", "nope.yaml"], "cannot read job file"), (["-f", "."], "")):
        code, _, err = run_cli(capsys, "plan", *argv)
        assert code == 2 and err.startswith("orch: error:") and words in err


def test_an_empty_file_name_is_called_empty(here, capsys):
    # It was "job file  is a directory" and, from init, "  exists (--force replaces it)".
    cli_refused(capsys, "plan", "-f", "", words=("-f: the job file's name is empty",))
    cli_refused(capsys, "init", "-f", "", words=("-f: the file name is empty",))


def _capture_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from orchestrator.run import session

    seen: list[Any] = []

    def fake_run(request: Any, *_args: Any) -> None:
        seen.append(request)
        raise Tripwire("run")

    monkeypatch.setattr(session, "Run", fake_run)
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    return seen


RUN_FILE = """\
model: bert-large
box:
  ttl: 3h
  ssh_cidr: [203.0.113.7/32]
run:
  command: python train.py --epochs "3"
  setup: pip install -r requirements.txt
  env: [ORCH_TEST_SECRET]
  fetch: [outputs]
  exclude: [data/]
"""


def test_run_takes_command_env_names_and_box_from_the_file(here, capsys, monkeypatch):
    seen = _capture_run(monkeypatch)
    write(here / "orch.yaml", RUN_FILE)
    monkeypatch.setenv("ORCH_TEST_SECRET", "s3cr3t 'quoted'")
    with pytest.raises(Tripwire):
        run_cli(capsys, "run")
    request = seen[0]
    assert request.spec.command == ["python", "train.py", "--epochs", "3"]
    assert request.spec.env == {"ORCH_TEST_SECRET": "s3cr3t 'quoted'"}
    assert request.spec.fetch == ["outputs"] and request.spec.excludes == ["data/"]
    assert request.up_options.ttl == "3h" and request.up_options.ssh_cidrs == [CIDR]
    # Arguments after -- replace the file's command; --ttl replaces its ttl.
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--ttl", "1h", "--", "./other.sh")
    assert seen[1].spec.command == ["./other.sh"] and seen[1].up_options.ttl == "1h"


def test_an_unset_env_name_is_refused_with_its_line(here, capsys, monkeypatch):
    _capture_run(monkeypatch)
    write(here / "orch.yaml", RUN_FILE)
    monkeypatch.delenv("ORCH_TEST_SECRET", raising=False)
    code, _, err = run_cli(capsys, "run")
    assert code == 2 and "orch.yaml:8: run.env[0]: ORCH_TEST_SECRET is not set" in err
    # plan has no environment to pass: the same file plans.
    assert run_cli(capsys, "plan")[0] == 0


def test_up_with_a_plan_flag_ignores_the_files_model(here, capsys, monkeypatch):
    seen: list[Any] = []

    def fake_up(options: Any, *_args: Any, **_kwargs: Any) -> None:
        seen.append((options.plan, options))
        raise Tripwire("up")

    monkeypatch.setattr(launch, "up", fake_up)
    write(here / "orch.yaml", "model: llama-3-8b\nbox:\n  name: filebox\n  ttl: 2h\n")
    plan = plan_file(here, candidate("g5.xlarge"))
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--plan", plan, "--ssh-cidr", CIDR, "--no-check")
    chosen, options = seen[0]
    assert chosen.choice.instance_type == "g5.xlarge"
    assert options.name == "filebox" and options.ttl == "2h"


def test_words_of_the_command_are_not_taken_for_orch_options(here, capsys, monkeypatch):
    """`orch run ./train.sh --plan x` runs `./train.sh --plan x`: the file still applies."""
    seen = _capture_run(monkeypatch)
    write(here / "orch.yaml", RUN_FILE.replace("  env: [ORCH_TEST_SECRET]\n", ""))
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "./train.sh", "--plan", "x")
    assert seen[0].spec.command == ["./train.sh", "--plan", "x"]
    assert seen[0].up_options.ttl == "3h"  # the file's box settings were not dropped


def test_an_endless_file_is_read_no_further_than_the_limit(here):
    # `-f` read the whole file before the 1 MiB check: /dev/zero (or a 10 GB file named by
    # mistake) took all the memory there was. Under a 1 GiB address-space limit that was a
    # MemoryError traceback.
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "-f", "/dev/zero"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == "orch: error: job file /dev/zero is larger than 1 MiB\n"


@pytest.mark.parametrize(
    "text",
    [
        "model: bert-large\nrun:\n  env: [ORCH_TEST_UNSET_NAME]\n",  # set at `orch run`, not yet
        "model: bert-large\nmodel: gpt2\n",  # being edited
    ],
)
def test_completion_does_not_read_the_job_file(here, capsys, monkeypatch, text):
    # Completion parses the command line (click's resilient parsing), which loaded ./orch.yaml:
    # one that names a variable not set in this shell, or has an error, printed
    # `orch: error: ...` at the tab key instead of completing.
    write(here / "orch.yaml", text)
    monkeypatch.delenv("ORCH_TEST_UNSET_NAME", raising=False)
    words = {
        "COMP_WORDS": "orch run --spot-r",
        "COMP_CWORD": "2",
        "_ORCH_COMPLETE": "bash_complete",
    }
    for name, value in words.items():
        monkeypatch.setenv(name, value)
    code, out, err = run_cli(capsys)
    assert (code, out, err) == (0, "plain,--spot-recovery\n", "")
