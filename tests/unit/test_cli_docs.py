"""docs/cli.md and docs/orch.schema.json are generated from the code (scripts/cli_docs.py):
this fails when a command's --help or the job file's keys change without regenerating them.
The prose (README.md, docs/*.md) is checked against the code too: every `orch ...` line names
real commands and options, the offline ones run, and the files and links it names exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/cli_docs.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reference_shows_durations_as_durations() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    for option in ("--check-timeout", "--lease-wait", "--ttl", "--deadline", "--wait"):
        lines = [line for line in text.splitlines() if line.strip().startswith(option + " ")]
        assert lines and all("DURATION" in line for line in lines), (option, lines)
    assert "SECONDS" not in text
    assert "## `orch completion`" in text and "## `orch init`" in text


def test_one_check_timeout_default_everywhere() -> None:
    """The same idea, the same default: how long a GPU check waits for a booting box."""
    import click

    from orchestrator.click_group import cli

    defaults = {}
    for path, flag in ((("check",), "--timeout"), (("up",), "--check-timeout"),
                       (("run",), "--check-timeout"), (("pool", "create"), "--check-timeout"),
                       (("pool", "lease"), "--check-timeout")):  # fmt: skip
        command: click.Command = cli
        for name in path:
            command = command.get_command(click.Context(command), name)  # type: ignore[union-attr]
        (option,) = [p for p in command.params if flag in getattr(p, "opts", ())]
        defaults[path] = (option.default, option.type.name)
    assert set(defaults.values()) == {("15m", "duration")}, defaults


def test_the_published_schema_is_a_json_schema() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads((REPO / "docs" / "orch.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert {"model", "job", "resources", "box", "run", "checkpoint", "recovery", "pool"} <= set(
        schema["properties"]
    )


def test_completion_scripts_and_answers() -> None:
    for shell in ("bash", "zsh", "fish"):
        out = subprocess.run(
            [sys.executable, "-m", "orchestrator", "completion", shell],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0 and "_ORCH_COMPLETE" in out.stdout, out.stderr
    env = {"COMP_WORDS": "orch plan --prec", "COMP_CWORD": "2", "_ORCH_COMPLETE": "bash_complete"}
    answer = subprocess.run(
        [sys.executable, "-m", "orchestrator"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip
    assert "plain,--precision" in answer.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator", "completion", "tcsh"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("orch: error:")


def test_list_and_plan_load_no_more_than_they_need() -> None:
    """`orch list` loads no launch or CI-runner code; `orch plan` without a job file loads
    neither PyYAML nor jsonschema, nor the code that reads a job file (its `-f` option, in
    orchestrator.jobfile.command, is part of the command) (benchmarks/startup.py measures
    the time)."""
    job_file_readers = ("orchestrator.jobfile.load", "orchestrator.jobfile.source")
    for argv, absent in (
        (["list"], ("orchestrator.ci_runner", "orchestrator.provision.launch")),
        (["plan", "--model", "bert-large"], ("yaml", "jsonschema", *job_file_readers)),
    ):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "orchestrator", *argv],
            cwd=REPO, capture_output=True, text=True, timeout=300,
            env={**os.environ, "ORCH_HOME": str(REPO / ".no-such-home")},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        loaded = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
        for module in absent:
            assert module not in loaded, (argv, module)


# ---------------------------------------------------------------- the prose docs vs the code

PROSE_DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
PROSE_DOCS.remove("docs/cli.md")  # generated from the code itself (test above)
# Flags the prose names in a code span of their own that belong to other programs: benchmark
# scripts, torchrun, pip, the CI runners, published training scripts.
NOT_ORCH_FLAGS = {
    "--agents", "--gpus-per-node", "--lose", "--only", "--refit",  # benchmarks/
    "--no-deps",  # pip
    "--disableupdate", "--jitconfig", "--token",  # actions/runner, gitlab-runner
    "--node-rank", "--local-addr",  # torchrun
    "--fp16", "--gradient_accumulation_steps",  # NVIDIA's run_squad
    "--safe-links",  # rsync
}  # fmt: skip
NOT_OUR_PATHS = {"scripts/run_squad.sh"}  # NVIDIA DeepLearningExamples' (docs/selection.md)


def _all_commands() -> dict[str, Any]:
    """{"plan": click command, "pool lease": ..., "": the group}, hidden ones included."""
    import click

    from orchestrator.click_group import cli

    found: dict[str, Any] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        found[" ".join(path)] = command
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])  # type: ignore[arg-type]

    walk(cli, [])
    return found


def _flags(command: Any) -> set[str]:
    """Every spelling of every option, the hidden (renamed) ones included."""
    spellings = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    return {o for o in spellings if o.startswith("-")} | {"--help", "-h"}


def _orch_lines(text: str) -> list[tuple[str, bool]]:
    """(what follows `orch `, whether it stood in a code block) for each orch command line
    of a code block (continuation lines joined) and each code span, even one broken over
    two lines of prose, that starts with one."""
    found: list[tuple[str, bool]] = []
    fenced, pending, prose = False, "", []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
        elif fenced:
            line = f"{pending} {line.strip()}".strip()
            pending = line[:-1] if line.endswith("\\") else ""
            match = None if pending else re.match(r"(?:\$ )?(?:\S*/)?orch (.*)", line)
            found += [(match.group(1), True)] if match else []
        else:
            prose.append(line)
    spans = re.findall(r"`(orch [^`]+)`", " ".join(prose))
    return found + [(span[5:], False) for span in spans]


def _words(line: str) -> list[str]:
    line = re.split(r" -- | #|\||>|;", line)[0]  # CMD, comments, pipes, redirections
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote in prose
        return line.split()


def test_every_orch_command_the_docs_show_exists_with_its_options() -> None:
    """Each `orch ...` line of README.md and docs/*.md names a real command, and every
    option on it is one of that command's (hidden old spellings count: they still work)."""
    commands = _all_commands()
    wrong = []
    for doc in PROSE_DOCS:
        for line, in_block in _orch_lines((REPO / doc).read_text()):
            words = _words(line)
            names = [w for w in words if not w.startswith("-")]
            path = ""
            for name in names[:2]:
                if f"{path} {name}".strip() in commands:
                    path = f"{path} {name}".strip()
            if in_block and names and not path:
                wrong.append(f"{doc}: `orch {line}`: no command {names[0]!r}")
            flags = {re.sub(r"[\[\]]|=.*", "", w) for w in words if re.match(r"\[?--?[a-z]", w)}
            for flag in sorted(flags - _flags(commands[path])):
                wrong.append(f"{doc}: `orch {line}`: `orch {path}` has no {flag}")
    assert not wrong, "\n".join(wrong)


def test_every_option_the_docs_name_alone_exists() -> None:
    """A code span that is an option (`--subnet-id`, `--ttl none`) names an option of some
    orch command, or one of another program's listed in NOT_ORCH_FLAGS."""
    known = set().union(*map(_flags, _all_commands().values())) | NOT_ORCH_FLAGS
    wrong = []
    for doc in PROSE_DOCS:
        fenced = False
        for number, line in enumerate((REPO / doc).read_text().splitlines(), 1):
            fenced ^= line.lstrip().startswith("```")
            spans = [] if fenced else re.findall(r"`(--[a-z][\w-]*)[^`]*`", line)
            wrong += [f"{doc}:{number}: {flag}" for flag in spans if flag not in known]
    assert not wrong, "\n".join(wrong)


def test_the_files_and_links_the_docs_name_exist() -> None:
    """Paths of this repository in code spans (orchestrator/, tests/, benchmarks/, scripts/,
    examples/, terraform/) and relative links resolve."""
    wrong = []
    ours = re.compile(r"`((?:orchestrator|tests|benchmarks|scripts|examples|terraform)/[^`\s]*)`")
    for doc in PROSE_DOCS:
        base = (REPO / doc).parent
        for number, line in enumerate((REPO / doc).read_text().splitlines(), 1):
            for path in ours.findall(line):
                path = path.rstrip(".,:)")
                if "<" in path or path in NOT_OUR_PATHS:
                    continue
                if not list(REPO.glob(path)):
                    wrong.append(f"{doc}:{number}: {path}")
            for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line):
                if "://" not in link and not (base / link).exists():
                    wrong.append(f"{doc}:{number}: link {link}")
    assert not wrong, "\n".join(wrong)


def test_the_offline_commands_the_docs_show_run(tmp_path, monkeypatch, capsys) -> None:
    """Each `orch plan` / `orch estimate` the docs show with its model runs as shown: exit 0
    (`-o FILE` goes to a temporary folder; no credentials, no network)."""
    from tests.support import run_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    ran, wrong = 0, []
    for doc in PROSE_DOCS:
        for line, _ in _orch_lines((REPO / doc).read_text()):
            words = _words(line)
            if not words or words[0] not in ("plan", "estimate"):
                continue
            if not {"--model", "--hf-config", "--params-m"} & set(words) or "faux" in words:
                continue  # a job file's, or the test-only cloud's (docs/adding-a-cloud.md)
            for flag in ("-o", "--output"):
                if flag in words:
                    words[words.index(flag) + 1] = str(tmp_path / "plan.json")
            code, _, err = run_cli(capsys, *words)
            ran += 1
            wrong += [f"{doc}: `orch {' '.join(words)}`: exit {code}: {err}"] if code else []
    assert ran >= 5 and not wrong, "\n".join(wrong)


def test_the_documented_up_json_is_what_up_prints() -> None:
    """docs/ci.md's `orch up --json` example and docs/provisioning.md's key list are the
    keys `up --json` prints, and the ssh command is shown as display.ssh_command builds it."""
    from orchestrator.commands.boxes import UP_JSON_KEYS
    from orchestrator.provision.display import ssh_command

    ci = (REPO / "docs" / "ci.md").read_text().split("## `orch up --json`", 1)[1]
    example = json.loads(ci.split("```json\n", 1)[1].split("```", 1)[0])
    assert tuple(example) == UP_JSON_KEYS
    shown = ssh_command(Path(".../id_ed25519"), Path(".../known_hosts"),
                        example["ssh_user"], example["public_ip"])  # fmt: skip
    assert example["ssh_command"] == shown
    provisioning = (REPO / "docs" / "provisioning.md").read_text()
    listed = provisioning.split("`up --json` prints one object: `")
    assert tuple(listed[1].split("`", 1)[0].replace("\n", " ").split(", ")) == UP_JSON_KEYS


def test_every_option_says_what_it_does() -> None:
    """No option in any --help is a bare name and type (`--optimizer [adamw|...]` was)."""
    import click

    silent = [
        f"orch {path} {param.opts[0]}".replace("  ", " ")
        for path, command in _all_commands().items()
        if not getattr(command, "hidden", False)
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert not silent, silent
