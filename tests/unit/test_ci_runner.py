"""CI-native boxes: `orch up --ci-runner github|gitlab` (orchestrator/ci_runner).

- the options: refused with exit 2 and one line before any network, cloud or Terraform call;
- registration against loopback stand-ins of the APIs (tests/sim/github_api.py,
  tests/sim/gitlab_api.py), which check each request against the documented shape; GitHub's
  accepts only JIT registration (generate-jitconfig), never a registration token;
- the box side: the rendered user data (driver script + runner section) run by bash in a
  temporary root with stub commands, the runner downloaded from a loopback mirror
  (tests/sim/runner_mirror.py); a GitHub runner waits for its JIT config in the login user's
  home (what `orch up` writes over SSH), takes it out of the file and starts; it must power
  off after;
- the CLI: registration comes before Terraform, the box record keeps no token, `orch down`
  removes the registration.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import ci_runner
from orchestrator.ci_runner import deliver, github
from orchestrator.ci_runner.common import DEFAULT_RUNNER_URL, from_options
from orchestrator.cli import main
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import launch, steps
from orchestrator.provision.boxes import Box, box_directory, box_exists, load_box
from orchestrator.provision.userdata import USER_DATA_LIMIT, render_user_data
from tests.sim.github_api import GitHubApi
from tests.sim.github_api import Token as GitHubToken
from tests.sim.gitlab_api import GitLabApi
from tests.sim.gitlab_api import Token as GitLabToken
from tests.sim.runner_mirror import Mirror, github_runner_tarball, gitlab_runner_binary
from tests.support import (
    Tripwire,
    candidate,
    forbid_cloud_reach,
    plan_file,
    require,
    run_cli,
    with_cloud_credentials,
)

GH = "ghp_goodtoken0123456789"
GL = "glpat-goodtoken0123456789"
REPO = "octo-org/gpu-app"
BASH = shutil.which("bash")
CIDR = "203.0.113.7/32"
AWS = "g4dn.xlarge"


def spec_for(kind: str, api: str, repo: str = REPO, token: str | None = None, **extra: Any):
    env = {"GH_TOKEN": token or GH} if kind == "github" else {"GITLAB_TOKEN": token or GL}
    return from_options(kind, repo, api, extra.get("runner_url"), extra.get("name", "gpu-1"), env)


@pytest.fixture
def gh() -> Any:
    with GitHubApi(
        tokens={GH: GitHubToken({REPO}), "ghp_noadmin": GitHubToken({REPO}, False)},
        runner_release=("v2.337.0", DEFAULT_RUNNER_URL["github"]),
    ) as api:
        yield api


@pytest.fixture
def gl() -> Any:
    tokens = {
        GL: GitLabToken({"create_runner", "manage_runner", "read_api"}, {42}),
        "glpat-readonly": GitLabToken({"read_api"}, {42}),
    }
    with GitLabApi(tokens=tokens, projects={42: "octo/gpu-app"}) as api:
        yield api


# ---------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (("github", REPO, None, None), {}, ("needs the caller's token", "$GH_TOKEN")),
        (("gitlab", "1", None, None), {"GH_TOKEN": GH}, ("$GITLAB_TOKEN",)),
        (("github", "not-a-repo", None, None), {"GH_TOKEN": GH}, ("OWNER/REPO",)),
        (("github", "a/../b", None, None), {"GH_TOKEN": GH}, ("OWNER/REPO",)),
        (("github", "o/r; rm -rf /", None, None), {"GH_TOKEN": GH}, ("OWNER/REPO",)),
        (("gitlab", "-x/y", None, None), {"GITLAB_TOKEN": GL}, ("GitLab project",)),
        (("github", None, None, None), {"GH_TOKEN": GH}, ("needs --ci-repo",)),
        (("github", REPO, "http://api.example.com", None), {"GH_TOKEN": GH}, ("https://",)),
        (("github", REPO, "https://u:p@ghe.example.com", None), {"GH_TOKEN": GH}, ("credentials",)),
        (
            ("github", REPO, "https://ghe.example.com/api/v3?x=1", None),
            {"GH_TOKEN": GH},
            ("query",),
        ),
        (("github", REPO, None, "ftp://mirror/runner.tgz"), {"GH_TOKEN": GH}, ("https://",)),
        (("github", REPO, None, "https://m.example.com/a b"), {"GH_TOKEN": GH}, ("URL",)),
        (("github", REPO, None, "https://m/'$(reboot)'"), {"GH_TOKEN": GH}, ("URL",)),
        (("github", REPO, None, None), {"GH_TOKEN": "two words"}, ("not a token",)),
        ((None, REPO, None, None), {"GH_TOKEN": GH}, ("--ci-repo needs --ci-runner",)),
        ((None, None, None, "https://m/r"), {}, ("--runner-url needs --ci-runner",)),
    ],
)
def test_bad_options_are_usage_errors_that_never_show_the_token(args, env, words) -> None:
    with pytest.raises(UsageError) as caught:
        from_options(*args, "gpu-1", env)
    text = caught.value.one_line()
    assert all(word in text for word in words), text
    assert "\n" not in text and GH not in text and "two words" not in text


def test_defaults_loopback_http_and_token_precedence() -> None:
    spec = from_options(
        "github", REPO, None, None, "gpu-1", {"GITHUB_TOKEN": "ghp_a", "GH_TOKEN": "ghp_secretB"}
    )
    assert spec is not None
    assert (spec.api_url, spec.runner_url) == (
        "https://api.github.com",
        DEFAULT_RUNNER_URL["github"],
    )
    assert (spec.token_env, spec.token, spec.label) == ("GH_TOKEN", "ghp_secretB", "orch-gpu-1")
    assert "ghp_secretB" not in repr(spec)
    local = from_options(
        "gitlab", "grp/sub/proj", "http://127.0.0.1:8/", None, "x", {"GITLAB_TOKEN": GL}
    )
    assert local is not None and local.api_url == "http://127.0.0.1:8"
    assert from_options(None, None, None, None, "x", {}) is None
    assert not spec.runner_url_chosen
    chosen = from_options(
        "github", REPO, None, "https://m.example.com/r.tgz", "x", {"GH_TOKEN": GH}
    )
    assert chosen is not None and chosen.runner_url_chosen
    assert DEFAULT_RUNNER_URL["github"].endswith("actions-runner-linux-x64-2.337.0.tar.gz")
    assert DEFAULT_RUNNER_URL["gitlab"].endswith("/binaries/gitlab-runner-linux-amd64")


def test_github_enterprise_web_url() -> None:
    assert github.web_url("https://api.github.com") == "https://github.com"
    assert github.web_url("https://ghe.example.com/api/v3") == "https://ghe.example.com"
    assert github.web_url("http://127.0.0.1:9") == "http://127.0.0.1:9"


# ----------------------------------------------------------------------------- registration


def test_github_registration_is_a_jit_runner_with_the_documented_request(gh) -> None:
    registration = ci_runner.register(spec_for("github", gh.url))
    (request,) = gh.requests
    assert request.method == "POST"
    assert request.path == f"/repos/{REPO}/actions/runners/generate-jitconfig"
    assert request.headers["authorization"] == f"Bearer {GH}"
    assert request.headers["accept"] == "application/vnd.github+json"
    assert request.headers["x-github-api-version"] == "2022-11-28"
    assert request.body == {
        "name": "gpu-1",
        "runner_group_id": 1,
        "labels": ["orch-gpu-1"],
        "work_folder": "_work",
    }
    assert gh.violations == []
    ((runner_id, config),) = gh.jit_configs.items()
    assert registration.runner_token == config
    assert registration.record == {
        "kind": "github",
        "api_url": gh.url,
        "repo": REPO,
        "name": "gpu-1",
        "label": "orch-gpu-1",
        "runner_id": runner_id,
    }
    assert [(r["name"], r["status"]) for r in gh.runners[REPO]] == [("gpu-1", "offline")]
    assert GH not in json.dumps(registration.record)
    assert registration.runner_token not in json.dumps(registration.record)
    assert registration.runner_token not in repr(registration)


def test_a_runner_name_that_is_taken_is_a_usage_error(gh) -> None:
    gh.register_runner(REPO, "gpu-1")
    with pytest.raises(UsageError) as caught:
        ci_runner.register(spec_for("github", gh.url))
    assert "already has a runner named gpu-1" in caught.value.one_line()
    assert gh.jit_configs == {}


def test_the_stand_in_refuses_registration_tokens(gh) -> None:
    from orchestrator.ci_runner.http import call

    url = f"{gh.url}/repos/{REPO}/actions/runners/registration-token"
    answer = call("POST", url, github.headers(GH))
    assert answer.status == 403 and gh.violations == [
        "registration-token: this stand-in accepts only JIT registration"
    ]


def test_the_newest_runner_release_is_resolved_unless_a_mirror_is_given(gh) -> None:
    said: list[str] = []
    spec = spec_for("github", gh.url)
    gh.runner_release = None  # as on GitHub Enterprise Server: 404
    assert ci_runner.runner_url_for(spec, said.append) == DEFAULT_RUNNER_URL["github"]
    assert said and "updates itself" in said[0]  # the stand-in has no release yet: 404
    newest = "https://github.com/actions/runner/releases/download/v2.399.0/" \
        "actions-runner-linux-x64-2.399.0.tar.gz"  # fmt: skip
    gh.runner_release = ("v2.399.0", newest)
    assert ci_runner.runner_url_for(spec, said.append) == newest
    mirrored = spec_for("github", gh.url, runner_url="https://mirror.example.com/r.tgz")
    before = len(gh.requests)
    assert ci_runner.runner_url_for(mirrored, said.append) == "https://mirror.example.com/r.tgz"
    assert len(gh.requests) == before  # --runner-url is used as it is
    gh.runner_release = ("v2.399.0", "http://evil.example.com/r.tgz")  # not https: not used
    assert ci_runner.runner_url_for(spec, said.append) == DEFAULT_RUNNER_URL["github"]


@pytest.mark.parametrize(
    ("token", "repo", "words"),
    [
        ("ghp_wrong", REPO, ("GitHub refused the token in $GH_TOKEN", "401 Bad credentials")),
        ("ghp_noadmin", REPO, ("may not manage runners", "403", "Administration: write")),
        (GH, "octo-org/other", ("not found, or the token cannot see it", "404")),
    ],
)
def test_github_refusals_are_usage_errors(gh, token, repo, words) -> None:
    with pytest.raises(UsageError) as caught:
        ci_runner.register(spec_for("github", gh.url, repo=repo, token=token))
    text = caught.value.one_line()
    assert all(word in text for word in words), text
    assert token not in text


def _without(key: str) -> Any:
    return lambda body: {**body, "runner": {k: v for k, v in body["runner"].items() if k != key}}


@pytest.mark.parametrize(
    ("fault", "by_id", "words"),
    [
        (_without("id"), False, "without a runner id"),
        (lambda b: {**b, "runner": {**b["runner"], "id": str(b["runner"]["id"])}}, False, "id"),
        (lambda b: {**b, "runner": {**b["runner"], "id": True}}, False, "without a runner id"),
        (lambda b: {**b, "runner": {**b["runner"], "id": -1}}, False, "without a runner id"),
        (lambda b: {**b, "runner": None}, False, "without a runner id"),
        (lambda b: ["not", "an", "object"], False, "without a runner id"),
        (lambda b: {**b, "encoded_jit_config": None}, True, "without a config"),
        (lambda b: {**b, "encoded_jit_config": "QUJD" * 8 + "$(reboot)"}, True, "without a config"),
    ],
)
def test_an_unusable_jit_answer_removes_the_runner_github_registered(gh, fault, by_id, words):
    """GitHub registers the runner before it answers generate-jitconfig: when the answer
    cannot be used (no usable runner id, no config), that runner is deleted again (by the
    answer's id, else found by its name), never another; the error is one line."""
    gh.register_runner(REPO, "someone-else")
    gh.jit_fault = fault
    with pytest.raises(OrchError) as caught:
        ci_runner.register(spec_for("github", gh.url))
    text = caught.value.one_line()
    assert words in text and "its runner gpu-1 was removed again" in text, text
    assert "\n" not in text and GH not in text
    assert [r["name"] for r in gh.runners[REPO]] == ["someone-else"]
    (runner_id,) = gh.jit_configs
    lookup = [] if by_id else [("GET", f"/repos/{REPO}/actions/runners", {"name": ["gpu-1"]})]
    assert [(r.method, r.path, r.query) for r in gh.requests[1:]] == [
        *lookup,
        ("DELETE", f"/repos/{REPO}/actions/runners/{runner_id}", {}),
    ]
    assert gh.violations == []


def test_a_failed_removal_of_an_unusable_jit_runner_is_one_line(gh) -> None:
    """The removal fails too (here: GitHub fails the lookup by name): one line that says
    what to delete by hand."""
    from tests.sim.api_standin import Answer

    gh.jit_fault = _without("id")
    served = gh.answer
    gh.answer = lambda r: (
        Answer(500, {"message": "Server Error"}) if r.method == "GET" else served(r)
    )
    with pytest.raises(OrchError) as caught:
        ci_runner.register(spec_for("github", gh.url))
    text = caught.value.one_line()
    assert "removing its runner gpu-1 again failed" in text and "500 Server Error" in text
    assert "Settings > Actions > Runners" in text and "\n" not in text


def test_no_answer_is_exit_1_naming_the_host() -> None:
    with pytest.raises(OrchError) as caught:
        ci_runner.register(spec_for("github", "http://127.0.0.1:9"))  # nothing listens
    assert caught.value.exit_code == 1 and "127.0.0.1" in caught.value.message


@pytest.mark.parametrize("repo", ["42", "octo/gpu-app"])
def test_gitlab_creates_a_tagged_project_runner(gl, repo) -> None:
    registration = ci_runner.register(spec_for("gitlab", gl.url, repo=repo))
    create = gl.requests[-1]
    assert (create.method, create.path) == ("POST", "/api/v4/user/runners")
    assert create.headers["private-token"] == GL
    assert create.body == {
        "runner_type": "project_type",
        "project_id": 42,
        "description": "orch gpu-1",
        "tag_list": ["orch-gpu-1"],
        "run_untagged": False,
    }
    if repo != "42":
        assert gl.requests[0].path == "/api/v4/projects/octo%2Fgpu-app"
    assert len(gl.requests) == (1 if repo == "42" else 2) and gl.violations == []
    (runner_id,) = gl.runners
    assert registration.record["runner_id"] == runner_id
    assert registration.record["project_id"] == 42
    assert registration.runner_token.startswith("glrt-")
    assert registration.runner_token not in json.dumps(registration.record)


@pytest.mark.parametrize(
    ("token", "repo", "words"),
    [
        ("glpat-wrong", "42", ("GitLab refused the token in $GITLAB_TOKEN", "401 Unauthorized")),
        ("glpat-readonly", "42", ("may not create a runner", "403", "create_runner scope")),
        (GL, "7", ("not found, or the token cannot see it", "404")),
        (GL, "octo/nope", ("read project octo/nope", "404 Project Not Found")),
    ],
)
def test_gitlab_refusals_are_usage_errors(gl, token, repo, words) -> None:
    with pytest.raises(UsageError) as caught:
        ci_runner.register(spec_for("gitlab", gl.url, repo=repo, token=token))
    text = caught.value.one_line()
    assert all(word in text for word in words), text
    assert gl.runners == {}


def test_forget_removes_a_github_runner_that_never_took_a_job(gh, capsys) -> None:
    record = ci_runner.register(spec_for("github", gh.url)).record
    gh.register_runner(REPO, "someone-else")
    said: list[str] = []
    assert ci_runner.forget(record, said.append, env={"GITHUB_TOKEN": GH})
    assert [(r.method, r.path, r.query) for r in gh.requests[1:]] == [
        ("DELETE", f"/repos/{REPO}/actions/runners/{record['runner_id']}", {}),
    ]
    assert [r["name"] for r in gh.runners[REPO]] == ["someone-else"]
    assert said == [f"removed the github runner orch-gpu-1 of {REPO}"]
    # An ephemeral runner that ran its job is gone already: nothing to delete.
    assert ci_runner.forget(record, said.append, env={"GH_TOKEN": GH})
    assert said[-1].endswith("was gone already") and gh.violations == []


def test_forget_deletes_the_gitlab_runner(gl) -> None:
    record = ci_runner.register(spec_for("gitlab", gl.url, repo="42")).record
    said: list[str] = []
    assert ci_runner.forget(record, said.append, env={"GITLAB_TOKEN": GL})
    assert (gl.requests[-1].method, gl.requests[-1].path) == (
        "DELETE",
        f"/api/v4/runners/{record['runner_id']}",
    )
    assert gl.runners == {} and said[0].startswith("removed the gitlab runner orch-gpu-1")


def test_forget_without_a_token_or_against_a_refusal_only_warns(gh, capsys) -> None:
    record = ci_runner.register(spec_for("github", gh.url)).record
    assert not ci_runner.forget(record, print, env={})
    assert "needs the caller's token in $GH_TOKEN or $GITHUB_TOKEN" in capsys.readouterr().err
    assert ci_runner.forget(record, print, env={"GH_TOKEN": "ghp_wrong"})
    err = capsys.readouterr().err
    assert err.startswith("orch: warning: could not remove") and "401" in err


def test_a_record_from_a_state_bucket_gets_the_token_only_for_a_trusted_url(gh, capsys) -> None:
    record = {**ci_runner.register(spec_for("github", gh.url)).record, "from_bundle": True}
    before = len(gh.requests)
    assert not ci_runner.forget(record, print, env={"GH_TOKEN": GH})
    assert "not sending your token" in capsys.readouterr().err
    assert len(gh.requests) == before
    assert ci_runner.forget(record, print, env={"GH_TOKEN": GH, "ORCH_CI_URL": gh.url + "/"})
    assert len(gh.requests) == before + 1


@pytest.mark.parametrize(
    "record",
    [
        {"kind": "github", "api_url": "https://evil.example.com/'x", "repo": REPO, "name": "b"},
        {"kind": "github", "api_url": "https://api.github.com", "repo": "x", "name": "b"},
        {"kind": "github", "api_url": "https://api.github.com", "repo": REPO, "name": "B;x"},
        {"kind": "svn", "api_url": "https://api.github.com", "repo": REPO, "name": "b"},
    ],
)
def test_a_damaged_record_is_not_acted_on(record, capsys) -> None:
    assert not ci_runner.forget(record, print, env={"GH_TOKEN": GH})
    assert "damaged" in capsys.readouterr().err


# --------------------------------------------------------------------------------- box side

NVIDIA_SMI = """#!/bin/bash
case "$*" in
  -L) echo "GPU 0: Tesla T4 (UUID: GPU-1)";;
  *) echo "580.95.05";;
esac
"""
TOOLS = (
    "bash", "sh", "date", "mkdir", "cat", "rm", "mv", "cp", "head", "grep", "chmod", "touch",
    "cut", "tr", "curl", "tar", "gzip", "printf", "sleep",
)  # fmt: skip
STUBS = {
    "systemctl": 'echo "systemctl $*" >>"$STUB_LOG"\n',
    "shutdown": 'echo "shutdown $*" >>"$STUB_LOG"\n',
    "chown": 'echo "chown $*" >>"$STUB_LOG"\n',
    "lspci": "echo '00:1e.0 3D controller [0302]: NVIDIA Corporation TU104GL [10de:1eb8]'\n",
    "id": 'if [ "$1" = -un ]; then echo "${STUB_WHOAMI:-root}"; exit 0; fi\n'
    'case " ${STUB_USERS:-} " in *" $2 "*) echo 1000;; *) exit 1;; esac\n',
    "runuser": 'echo "runuser $*" >>"$STUB_LOG"\n[ "$1" = -u ] || exit 9\n'
    'user=$2; shift 3\nSTUB_WHOAMI=$user exec "$@"\n',
}


class BoxRoot:
    """A temporary root with stub commands; the rendered user data runs in it."""

    def __init__(self, base: Path, *, systemd: bool, users: str = "ubuntu") -> None:
        self.root, self.bin, self.log = base / "root", base / "bin", base / "stub.log"
        self.home = base / "home"  # the login user's
        (self.root / "etc").mkdir(parents=True)
        self.bin.mkdir()
        (self.root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
        if systemd:
            (self.root / "run/systemd/system").mkdir(parents=True)
        for tool in TOOLS:
            found = shutil.which(tool)
            if found:
                (self.bin / tool).symlink_to(found)
        for name, body in {**STUBS, "nvidia-smi": NVIDIA_SMI}.items():
            path = self.bin / name
            path.write_text(body if body.startswith("#!") else "#!/bin/bash\n" + body)
            path.chmod(0o755)
        self.users = users

    def env(self) -> dict[str, str]:
        return {
            "PATH": str(self.bin),
            "ORCH_ROOT": str(self.root),
            "STUB_LOG": str(self.log),
            "STUB_USERS": self.users,
            "HOME": str(self.home),
        }

    def deliver(self, config: str) -> None:
        """What deliver.py's remote command does: a 0600 file, renamed into place."""
        self.home.mkdir(exist_ok=True)
        tmp = self.home / ".orch-ci-runner.jit.tmp"
        tmp.write_text(config)
        tmp.chmod(0o600)
        tmp.rename(self.home / ".orch-ci-runner.jit")

    def run(self, user_data: str) -> subprocess.CompletedProcess[str]:
        script = self.root.parent / "user-data"
        script.write_text(user_data)
        return subprocess.run(
            [BASH, str(script)], env=self.env(), capture_output=True, text=True, timeout=60
        )

    def calls(self, prefix: str = "") -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if line.startswith(prefix)]

    def wait_for(self, prefix: str, timeout: float = 120.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.calls(prefix):
                return self.calls()
            time.sleep(0.05)
        raise AssertionError(f"no {prefix!r} in {self.calls()}: {self.runner_log()}")

    def runner_log(self) -> str:
        path = self.root / "var/log/orch-ci-runner.log"
        return path.read_text() if path.exists() else "(no runner log)"


def user_data_for(kind: str, mirror: Mirror, *, user: str = "ubuntu", expires: str | None = None):
    path = "/actions/runner.tar.gz" if kind == "github" else "/gitlab/gitlab-runner"
    spec = from_options(
        kind,
        REPO if kind == "github" else "42",
        "https://gitlab.example.com" if kind == "gitlab" else None,
        mirror.url + path,
        "gpu-7",
        {"GH_TOKEN": GH, "GITLAB_TOKEN": GL},
    )
    assert spec is not None
    # GitHub: the JIT config (never in the section); GitLab: the runner token (in it).
    token = "eyJhIjoiYiJ9" * 300 if kind == "github" else "glrt-abcDEF_123.x"
    section = ci_runner.section_for(spec, "" if kind == "github" else token, user)
    return render_user_data(expires, "aws", section), token, path


@pytest.fixture
def mirror() -> Any:
    files = {
        "/actions/runner.tar.gz": github_runner_tarball(),
        "/gitlab/gitlab-runner": gitlab_runner_binary(),
    }
    with Mirror(files) as served:
        yield served


def test_github_box_downloads_registers_ephemeral_runs_one_job_then_powers_off(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=False)
    user_data, config, path = user_data_for("github", mirror)
    assert config not in user_data and "ACTIONS_RUNNER_INPUT_JITCONFIG" in user_data
    result = box.run(user_data)
    assert result.returncode == 0, result.stderr
    box.wait_for("runuser")
    assert mirror.fetched == [path]
    assert not box.calls("run.sh")  # it waits for its config: no config, no runner
    box.deliver(config)  # what `orch up` does over SSH once the box answers
    calls = box.wait_for("shutdown")
    runs = [c for c in calls if c.startswith(("config.sh", "run.sh", "shutdown", "runuser"))]
    assert runs[0].startswith("runuser -u ubuntu -- /bin/bash ")
    assert runs[1:] == [
        "run.sh  as=ubuntu token=",
        f"run.sh jitconfig={config}",
        "shutdown -h now",
    ]  # no config.sh, no --disableupdate: a JIT runner that updates itself
    assert "chown -R ubuntu " in " ".join(box.calls("chown"))
    assert not (box.home / ".orch-ci-runner.jit").exists()  # taken out before any job ran
    env = box.root / "var/lib/orch/ci-runner.env"
    assert env.stat().st_mode & 0o077 == 0 and config not in env.read_text()
    assert (box.root / "var/lib/orch/ready").exists()  # the driver part ran first


def test_with_systemd_the_runner_is_a_unit_of_the_login_user_that_powers_off(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=True)
    user_data, config, _ = user_data_for("github", mirror)
    assert box.run(user_data).returncode == 0
    assert box.calls("systemctl")[-2:] == [
        "systemctl daemon-reload",
        "systemctl start --no-block orch-ci-runner.service",
    ]
    unit = (box.root / "etc/systemd/system/orch-ci-runner.service").read_text()
    fields = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
    assert fields["User"] == "ubuntu"
    assert fields["ExecStopPost"] == "+/sbin/shutdown -h now"
    assert fields["EnvironmentFile"] == f"{box.root}/var/lib/orch/ci-runner.env"
    assert not box.calls("shutdown") and not box.calls("config.sh")  # systemd runs it
    # What systemd then does: ExecStart with the env file, as the user; then ExecStopPost.
    environment = {**box.env(), "STUB_WHOAMI": "ubuntu"}
    for line in Path(fields["EnvironmentFile"]).read_text().splitlines():
        key, _, value = line.partition("=")
        environment[key] = value
    command = fields["ExecStart"].split()
    box.deliver(config)
    assert subprocess.run(command, env=environment, timeout=30).returncode == 0
    assert box.calls("run.sh") == ["run.sh  as=ubuntu token=", f"run.sh jitconfig={config}"]
    assert not box.calls("shutdown") and not box.calls("config.sh")


def test_gitlab_box_runs_a_single_build_until_the_expiry(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=False)
    user_data, token, path = user_data_for("gitlab", mirror, expires="2031-03-04T05:06:07Z")
    assert box.run(user_data).returncode == 0
    calls = box.wait_for("shutdown")
    assert mirror.fetched == [path]
    (run, given) = [c for c in calls if c.startswith("gitlab-runner")]
    match = re.fullmatch(
        r"gitlab-runner run-single --url https://gitlab.example.com --executor shell"
        r" --max-builds 1 --wait-timeout (\d+) as=ubuntu token=",  # no ORCH_CI_TOKEN left
        run,
    )
    assert match and int(match[1]) > 3600 * 24 * 365, run
    # The token reaches the runner in its environment only, never in its argv (ps).
    assert given == f"gitlab-runner ci_server_token={token}" and token not in run
    assert calls.index(run) < calls.index("shutdown -h now")


def test_as_root_the_github_runner_is_allowed_to_run_as_root(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=False, users="")  # no such login user on the image
    user_data, config, _ = user_data_for("github", mirror, user="ec2-user")
    box.deliver(config)
    assert box.run(user_data).returncode == 0
    box.wait_for("shutdown")
    assert box.calls("runuser")[0].startswith("runuser -u root -- ")
    assert "RUNNER_ALLOW_RUNASROOT=1" in (box.root / "var/lib/orch/ci-runner.env").read_text()


def test_a_failed_download_powers_off_without_a_runner(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=True)
    user_data, _, _ = user_data_for("github", mirror)
    assert box.run(user_data.replace("/actions/runner.tar.gz", "/missing.tgz")).returncode == 0
    assert box.calls("shutdown") == ["shutdown -h now"]
    assert not (box.root / "etc/systemd/system/orch-ci-runner.service").exists()
    assert "download failed" in box.runner_log()


def test_no_runner_while_a_nouveau_reboot_is_pending_and_none_twice(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=True)
    user_data, _, _ = user_data_for("github", mirror)
    state = box.root / "var/lib/orch"
    # The driver part asked for a reboot (no marker yet): no runner now.
    pending = user_data.replace('\nmain "$@"\n', '\nmkdir -p "$STATE_DIR"; exit 0\n')
    assert box.run(pending).returncode == 0
    assert mirror.fetched == [] and not (box.root / "opt/orch-ci-runner").exists()
    # The resumed run finishes the set-up: the runner starts, once.
    assert box.run(user_data).returncode == 0 and (state / "ready").exists()
    assert box.run(user_data).returncode == 0
    assert len(mirror.fetched) == 1
    assert box.calls("systemctl").count("systemctl start --no-block orch-ci-runner.service") == 1


def test_a_failed_driver_set_up_still_runs_the_job(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=False)
    (box.bin / "nvidia-smi").unlink()
    (box.bin / "lspci").write_text("#!/bin/bash\n")  # no GPU on the bus: the set-up fails
    user_data, config, _ = user_data_for("github", mirror)
    box.deliver(config)
    assert box.run(user_data).returncode == 1
    assert (box.root / "var/lib/orch/failed").exists()
    box.wait_for("shutdown")
    assert box.calls("run.sh")


def test_user_data_with_the_section_fits_and_is_shellcheck_clean(tmp_path):
    long_mirror = "https://mirror.example.com/" + "m" * 360 + "/runner.tgz"
    spec = from_options("github", REPO, None, long_mirror[:400], "a" * 39, {"GH_TOKEN": GH})
    assert spec is not None
    text = render_user_data(
        "2031-03-04T05:06:07Z", "aws", ci_runner.section_for(spec, "", "ubuntu")
    )
    assert len(text.encode()) <= USER_DATA_LIMIT
    assert text.rstrip().endswith('trap orch_ci_runner EXIT\nmain "$@"')
    assert "ORCH_EXPIRES_AT=" in text and "orch-expire.timer" in text
    shellcheck = shutil.which("shellcheck")
    require(shellcheck, "shellcheck")
    path = tmp_path / "user-data"
    path.write_text(text)
    result = subprocess.run([shellcheck, str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def test_quoting_keeps_hostile_looking_values_literal(tmp_path, mirror):
    require(BASH, "bash")
    box = BoxRoot(tmp_path, systemd=False)
    pwned = tmp_path / "pwned"
    query = f"?a=1;b=$(touch$IFS{pwned})&c=`touch$IFS{pwned}`"
    with pytest.raises(UsageError):  # backquotes are not URL characters
        from_options("github", REPO, None, mirror.url + "/r" + query, "gpu-7", {"GH_TOKEN": GH})
    query = query.split("&c=")[0]
    spec = from_options(
        "github", "o/r.x-_", None, mirror.url + "/actions/runner.tar.gz" + query, "gpu-7",
        {"GH_TOKEN": GH},
    )  # fmt: skip
    assert spec is not None
    section = ci_runner.section_for(spec, "", "ubuntu")
    box.deliver("QUJD" * 8 + "$(touch pwned)")  # whatever arrives is data, never shell text
    assert box.run(render_user_data(None, "aws", section)).returncode == 0
    box.wait_for("shutdown")
    assert mirror.fetched == ["/actions/runner.tar.gz" + query]
    assert box.calls("run.sh")[-1] == "run.sh jitconfig=" + "QUJD" * 8 + "$(touch pwned)"
    assert not pwned.exists() and not (box.home / "pwned").exists()


# -------------------------------------------------------------------------------------- CLI


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with_cloud_credentials(monkeypatch)
    for name in ("GH_TOKEN", "GITHUB_TOKEN", "GITLAB_TOKEN", "ORCH_CI_URL"):
        monkeypatch.delenv(name, raising=False)
    forbid_cloud_reach(monkeypatch)
    return tmp_path / "home"


def up(plan: str, name: str, *extra: str) -> list[str]:
    return ["up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", *extra]


def one_error(code: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("orch: error: "), err
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


def test_up_without_a_token_is_refused_before_anything(capsys, home, tmp_path, gh) -> None:
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(
        capsys, *up(plan, "gpu-1", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url)
    )
    one_error(code, err, "$GH_TOKEN")
    assert gh.requests == [] and not box_exists("gpu-1")


def test_up_with_a_bad_repo_or_url_is_refused(capsys, home, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GH_TOKEN", GH)
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(capsys, *up(plan, "gpu-1", "--ci-runner", "github", "--ci-repo", "x"))
    one_error(code, err, "OWNER/REPO")
    code, _, err = run_cli(
        capsys,
        *up(
            plan,
            "gpu-1",
            "--ci-runner",
            "github",
            "--ci-repo",
            REPO,
            "--runner-url",
            "http://mirror.example.com/r.tgz",
        ),
    )
    one_error(code, err, "--runner-url", "https://")
    assert not box_exists("gpu-1")


def test_a_refused_token_creates_nothing(capsys, home, tmp_path, gh, monkeypatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_wrong")
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(
        capsys, *up(plan, "gpu-1", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url)
    )
    one_error(code, err, "GitHub refused the token in $GH_TOKEN", "401")
    assert [r.method for r in gh.requests] == ["GET", "POST"]  # the release, the JIT runner
    assert not box_exists("gpu-1") and gh.jit_configs == {}  # Terraform never ran (tripwire)


def test_registration_comes_before_terraform_and_the_config_stays_out_of_user_data(
    capsys, home, tmp_path, gh, monkeypatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", GH)
    seen: list[str] = []

    def render(_directory: Path, request: Any) -> None:
        seen.append(request.user_data)
        raise Tripwire("terraform")

    monkeypatch.setattr(launch, "render_box", render)
    plan = plan_file(tmp_path, candidate(AWS))
    with pytest.raises(Tripwire):
        main(up(plan, "gpu-1", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url))
    assert [r.path for r in gh.requests] == [
        "/repos/actions/runner/releases/latest",
        f"/repos/{REPO}/actions/runners/generate-jitconfig",
    ]
    (user_data,) = seen
    ((runner_id, config),) = gh.jit_configs.items()
    assert (
        "ACTIONS_RUNNER_INPUT_JITCONFIG" in user_data and DEFAULT_RUNNER_URL["github"] in user_data
    )
    assert config not in user_data and GH not in user_data
    # Terraform failed after the box record was written: it keeps the runner, for `down`.
    assert load_box("gpu-1").ci_runner["runner_id"] == runner_id


def fake_apply(
    monkeypatch: pytest.MonkeyPatch, seen: list[str], delivered: list | None = None
) -> None:
    """Terraform's apply, faked: the box comes up; the JIT config's SSH hand-over is recorded
    (tests/e2e/test_ci_runner_e2e.py does it over real SSH)."""
    sink = [] if delivered is None else delivered
    monkeypatch.setattr(deliver, "deliver_jit_config", lambda *args: sink.append(args))

    def attempt(box: Box, request: Any, location: Any, _say: Any, _progress: Any) -> None:
        seen.append(request.user_data)
        box.candidate, box.cloud, box.region = request.candidate, "aws", "us-east-1"
        box.outputs = {"instance_id": "i-0abc", "public_ip": "198.51.100.7", "ssh_user": "ubuntu"}
        steps.set_state(box, "up", None, location)

    monkeypatch.setattr(launch, "_attempt", attempt)


@pytest.mark.parametrize("kind", ["github", "gitlab"])
def test_up_json_record_and_down_remove_the_registration(
    capsys, home, tmp_path, gh, gl, monkeypatch, kind
) -> None:
    api, repo = (gh, REPO) if kind == "github" else (gl, "octo/gpu-app")
    monkeypatch.setenv(
        "GH_TOKEN" if kind == "github" else "GITLAB_TOKEN", GH if kind == "github" else GL
    )
    seen: list[str] = []
    delivered: list[tuple[str, str]] = []
    fake_apply(monkeypatch, seen, delivered)
    plan = plan_file(tmp_path, candidate(AWS))
    code, out, err = run_cli(
        capsys,
        *up(
            plan,
            "gpu-9",
            "--ci-runner",
            kind,
            "--ci-repo",
            repo,
            "--ci-url",
            api.url,
            "--ttl",
            "2h",
            "--json",
        ),
    )
    assert code == 0, err
    shown = json.loads(out)["ci_runner"]
    runner_id = next(iter(gh.jit_configs if kind == "github" else gl.runners))
    assert shown == {"kind": kind, "label": "orch-gpu-9", "repo": repo, "runner_id": runner_id}
    record = load_box("gpu-9").ci_runner
    assert record is not None and record["api_url"] == api.url and record["name"] == "gpu-9"
    if kind == "github":
        assert delivered == [("gpu-9", gh.jit_configs[runner_id])]
    secrets = [GH, GL, *gh.jit_configs.values(), *(r["token"] for r in gl.runners.values())]
    for path in box_directory("gpu-9").rglob("*"):
        if path.is_file():
            assert not any(s in path.read_text(errors="replace") for s in secrets), path
    code, _, err = run_cli(capsys, "down", "gpu-9")
    assert code == 0, err
    assert not box_exists("gpu-9")
    if kind == "github":
        assert gh.runners[REPO] == [] and gh.requests[-1].method == "DELETE"
    else:
        assert gl.runners == {} and gl.requests[-1].method == "DELETE"
    assert api.violations == []


def test_down_without_a_token_warns_and_still_succeeds(capsys, home, tmp_path, gh, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", GH)
    fake_apply(monkeypatch, [])
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(
        capsys, *up(plan, "gpu-3", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url)
    )
    assert code == 0, err
    monkeypatch.delenv("GH_TOKEN")
    code, out, err = run_cli(capsys, "down", "gpu-3", "--json")
    assert code == 0 and json.loads(out)["state"] == "destroyed"
    assert "orch: warning:" in err and "was not removed" in err


def test_a_gitlab_runner_is_deleted_again_when_up_fails_before_the_record(
    capsys, home, tmp_path, gl, monkeypatch
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", GL)
    fake_apply(monkeypatch, [])
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(capsys, *up(plan, "gpu-4"))  # a box without a runner, up
    assert code == 0, err
    code, _, err = run_cli(
        capsys, *up(plan, "gpu-4", "--ci-runner", "gitlab", "--ci-repo", "42", "--ci-url", gl.url)
    )
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "orch: error: box gpu-4 is already"
    )
    assert [r.method for r in gl.requests] == ["POST", "DELETE"] and gl.runners == {}
    assert load_box("gpu-4").ci_runner is None


def test_a_github_runner_whose_config_cannot_be_handed_over_is_removed(
    capsys, home, tmp_path, gh, monkeypatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", GH)
    fake_apply(monkeypatch, [])

    def unreachable(name: str, _config: str) -> None:
        raise OrchError(f"box {name} is up, but its GitHub runner config could not be handed")

    monkeypatch.setattr(deliver, "deliver_jit_config", unreachable)
    plan = plan_file(tmp_path, candidate(AWS))
    code, _, err = run_cli(
        capsys, *up(plan, "gpu-5", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url)
    )
    assert code == 1 and "could not be handed" in err
    assert gh.runners[REPO] == [] and gh.violations == []


def test_a_failed_box_s_earlier_jit_runner_is_removed_before_the_name_is_reused(
    capsys, home, tmp_path, gh, monkeypatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", GH)
    fake_apply(monkeypatch, [])
    plan = plan_file(tmp_path, candidate(AWS))
    args = up(plan, "gpu-6", "--ci-runner", "github", "--ci-repo", REPO, "--ci-url", gh.url)
    assert run_cli(capsys, *args)[0] == 0
    box = load_box("gpu-6")
    box.state = "failed"  # e.g. its check failed; its runner never took a job
    box.save()
    first = box.ci_runner["runner_id"]
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    assert [r["id"] for r in gh.runners[REPO]] == [load_box("gpu-6").ci_runner["runner_id"]]
    assert first not in [r["id"] for r in gh.runners[REPO]] and gh.violations == []
