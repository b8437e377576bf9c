"""The box side: a shell section that orch puts into the user data before the driver script's
final `main "$@"` (orchestrator/provision/userdata.py). It sets an EXIT trap, so it runs when the
driver set-up has ended (ready or failed; not while a nouveau reboot is pending: the resumed
run comes back here). It downloads the runner from the runner URL and runs one job as the
image's login user: in a systemd unit when systemd runs the box (ExecStopPost powers the box
off), else in the background followed by `shutdown -h now`.

Every value is validated before and shell-quoted here.

GitHub: no credential is in the user data, which any process on the box (the CI job too) can
read back from the instance metadata service for the box's whole life. The job script waits
for the runner's JIT config, which `orch up` writes over SSH into ~/.orch-ci-runner.jit once
the box answers (orchestrator/ci_runner/deliver.py), reads it, deletes the file and hands it
to the runner in ACTIONS_RUNNER_INPUT_JITCONFIG (the runner reads ACTIONS_RUNNER_INPUT_<ARG>
as `--<arg>` and removes it from its own environment before it starts a job:
actions/runner src/Runner.Listener/CommandSettings.cs). No job exists before the runner has
started, and by then the file is gone. The config registers this one runner only.

GitLab: the runner token lands in the user data (as with ec2-github-runner): it only lets a
runner take this project's jobs tagged orch-BOX, and `orch down` deletes that runner. On the
box it sits in a root-only env file, not in the job script, and reaches the runner in its
environment, never on its command line (which `ps` shows to every user). The shell executor
hands the runner's environment to the job (executors/shell: `os.Environ()`), so the job, which
runs as the same user and could read the runner's /proc environ anyway, sees it too.
"""

from __future__ import annotations

import re
import shlex

from orchestrator.errors import UsageError

_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,255}")
UNIT = "orch-ci-runner.service"

# The runner's own command lines (run as the login user, in the runner directory).
# GitHub: a JIT runner needs no config.sh: `./run.sh --jitconfig CONFIG` (here from the
# environment, see above) registers, takes one job and exits; it updates itself when GitHub
# asks it to (https://docs.github.com/en/rest/actions/self-hosted-runners#create-configuration-
# for-a-just-in-time-runner-for-a-repository). It waits for the config until the box's expiry
# ($ORCH_CI_WAIT seconds; 0: no expiry). GitLab: https://docs.gitlab.com/runner/commands/
# #gitlab-runner-run-single (--max-builds; --wait-timeout: seconds to wait for the first job,
# 0 = no limit).
JIT_FILE = ".orch-ci-runner.jit"  # in the login user's home, written by `orch up` over SSH
_JOBS = {
    "github": "tar xzf runner.tar.gz || exit 1\n"
    f'jit="$HOME/{JIT_FILE}"\n'
    'until [[ -s "$jit" ]]; do\n'
    "    if ((ORCH_CI_WAIT > 0 && SECONDS >= ORCH_CI_WAIT)); then\n"
    '        echo "orch-ci-runner: no runner config arrived"; exit 1\n'
    "    fi\n"
    "    sleep 2\n"
    "done\n"
    'ACTIONS_RUNNER_INPUT_JITCONFIG=$(<"$jit") && rm -f "$jit" || exit 1\n'
    "export ACTIONS_RUNNER_INPUT_JITCONFIG\n"
    "exec ./run.sh\n",
    # The token goes in CI_SERVER_TOKEN, which run-single reads as --token
    # (gitlabhq/gitlab-runner common/config.go, RunnerCredentials: `long:"token"
    # env:"CI_SERVER_TOKEN"`): on the command line every user of the box would see it in ps.
    "gitlab": 'export CI_SERVER_TOKEN="$ORCH_CI_TOKEN" && unset ORCH_CI_TOKEN || exit 1\n'
    "exec ./gitlab-runner run-single --url {url} --executor shell --max-builds 1"
    ' --wait-timeout "$ORCH_CI_WAIT"\n',
}
_FILES = {"github": "runner.tar.gz", "gitlab": "gitlab-runner"}

_SECTION = """\
# --- orch CI runner (orchestrator/ci_runner/userdata.py): once the driver set-up has ended,
# one CI job as the login user, then power off.
orch_ci_runner() {{
    trap - ERR
    set +e
    # Neither marker: a nouveau reboot is pending; the resumed run comes back here.
    [[ -e "$READY" || -e "$FAILED" ]] || return 0
    local dir="$ORCH_ROOT/opt/orch-ci-runner" env="$STATE_DIR/ci-runner.env" user={user} wait=0
    local url={runner_url}
    [[ ! -e "$dir" ]] || return 0
    exec >>"$ORCH_ROOT/var/log/orch-ci-runner.log" 2>&1
    id -u "$user" >/dev/null 2>&1 || user=root
    mkdir -p "$dir"
    echo "orch-ci-runner: {kind} runner as $user from $url"
    if ! curl -fsSL --retry 5 --retry-connrefused -o "$dir/{file}" "$url"; then
        echo "orch-ci-runner: download failed: powering off"
        shutdown -h now
        return 0
    fi
    chmod 755 "$dir/{file}"
    if [[ -n "$ORCH_EXPIRES_AT" ]]; then
        wait=$(($(date -u -d "$ORCH_EXPIRES_AT" +%s) - $(date -u +%s)))
        ((wait > 0)) || wait=1
    fi
    (umask 077 && printf 'ORCH_CI_TOKEN=%s\\nORCH_CI_WAIT=%s\\n' {token} "$wait" >"$env")
    [[ "$user" != root ]] || echo RUNNER_ALLOW_RUNASROOT=1 >>"$env"
    cat >"$dir/job.sh" <<'ORCH_CI_JOB'
#!/bin/bash
cd "${{0%/*}}" || exit 1
{job}ORCH_CI_JOB
    chown -R "$user" "$dir"
    if [[ -d "$ORCH_ROOT/run/systemd/system" ]]; then
        mkdir -p "$UNIT_DIR"
        cat >"$UNIT_DIR/{unit}" <<ORCH_CI_UNIT
[Unit]
Description=orch CI runner: one job, then power off
Wants=network-online.target
After=network-online.target

[Service]
User=$user
WorkingDirectory=$dir
EnvironmentFile=$env
ExecStart=/bin/bash $dir/job.sh
ExecStopPost=+/sbin/shutdown -h now
ORCH_CI_UNIT
        systemctl daemon-reload && systemctl start --no-block {unit} && return 0
        echo "orch-ci-runner: systemd did not start {unit}: powering off"
        shutdown -h now
    else
        # shellcheck source=/dev/null
        (set -a && . "$env" && runuser -u "$user" -- /bin/bash "$dir/job.sh"
            shutdown -h now) </dev/null &
    fi
}}
trap orch_ci_runner EXIT
"""


def render_section(
    kind: str, runner_url: str, token: str, server_url: str, name: str, label: str, user: str
) -> str:
    """The section for one box. `server_url` is what the runner registers with: the
    repository URL for GitHub, the instance URL for GitLab. `token` is GitLab's runner token;
    for GitHub it is "" (the JIT config comes over SSH, never in the user data)."""
    if kind not in _JOBS:
        raise UsageError(f"unknown CI runner kind {kind!r}")
    if not _USER.fullmatch(user):
        raise UsageError(f"login user {user!r} is not a POSIX user name")
    if kind == "github" and token:
        raise UsageError("a GitHub runner's config never goes into user data")
    if kind != "github" and not _TOKEN.fullmatch(token):
        raise UsageError("the runner token holds characters that cannot go into user data")
    for value in (runner_url, server_url, name, label):
        if not value or not value.isprintable():
            raise UsageError(f"{value[:40]!r} cannot go into user data")
    job = _JOBS[kind].format(
        url=shlex.quote(server_url), name=shlex.quote(name), label=shlex.quote(label)
    )
    return _SECTION.format(
        kind=kind,
        user=shlex.quote(user),
        runner_url=shlex.quote(runner_url),
        file=_FILES[kind],
        token=shlex.quote(token),
        job=job,
        unit=UNIT,
    )
