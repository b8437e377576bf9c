"""The --ci-* options of `orch up`, checked before any network, cloud or Terraform call.

The caller's token comes from the environment only (never an option, never written down):
GH_TOKEN or GITHUB_TOKEN for GitHub (GH_TOKEN first, as the gh CLI reads them), GITLAB_TOKEN for
GitLab.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from orchestrator.errors import UsageError

KINDS = ("github", "gitlab")
DEFAULT_API_URL = {"github": "https://api.github.com", "gitlab": "https://gitlab.com"}
# Runner releases; --runner-url points the box at a mirror instead. GitHub: `up` asks for the
# newest actions/runner release (github.latest_runner_url) and falls back to this one; either
# way the runner updates itself (no --disableupdate): GitHub refuses jobs to runners whose
# version is more than 30 days behind (https://docs.github.com/en/actions/hosting-your-own-
# runners/managing-self-hosted-runners/autoscaling-with-self-hosted-runners#controlling-
# runner-software-updates-on-self-hosted-runners).
# actions/runner v2.337.0, linux-x64 (https://github.com/actions/runner/releases);
# gitlab-runner v18.10.1, linux-amd64 binary (https://docs.gitlab.com/runner/install/linux-manually/).
DEFAULT_RUNNER_URL = {
    "github": "https://github.com/actions/runner/releases/download/v2.337.0/"
    "actions-runner-linux-x64-2.337.0.tar.gz",
    "gitlab": "https://s3.dualstack.us-east-1.amazonaws.com/gitlab-runner-downloads/v18.10.1/"
    "binaries/gitlab-runner-linux-amd64",
}
TOKEN_ENV = {"github": ("GH_TOKEN", "GITHUB_TOKEN"), "gitlab": ("GITLAB_TOKEN",)}
LABEL_PREFIX = "orch-"

# GitHub: owner (user or org login) / repository name.
_GITHUB_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
# GitLab: a numeric project id, or a path group[/subgroup...]/project.
_GITLAB_ID = re.compile(r"[1-9][0-9]{0,18}")
_GITLAB_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}"
_GITLAB_PATH = re.compile(rf"{_GITLAB_SEGMENT}(?:/{_GITLAB_SEGMENT}){{1,20}}")
# URLs travel into shell text and HTTP requests: printable ASCII without quotes, spaces or
# backslashes (shlex.quote still quotes them; this keeps the text readable and one line).
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+")
MAX_API_URL = 200
MAX_RUNNER_URL = 400
# A token goes into an HTTP header: printable ASCII, no spaces (no header injection).
_TOKEN = re.compile(r"[\x21-\x7e]{1,1024}")


@dataclass(frozen=True, slots=True)
class CiRunner:
    """A validated --ci-runner request for box `name`."""

    kind: str  # github | gitlab
    repo: str  # GitHub OWNER/REPO; GitLab project id or path
    api_url: str  # API base (GitHub) or instance URL (GitLab), no trailing slash
    runner_url: str  # where the box downloads the runner software
    name: str  # the box name, also the runner's name
    token_env: str  # the variable the token came from (for messages)
    token: str = field(repr=False)  # the caller's token: sent to the API, never stored
    runner_url_chosen: bool = False  # --runner-url given: used as it is, never resolved

    @property
    def label(self) -> str:
        return LABEL_PREFIX + self.name


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(option: str, text: str, limit: int, *, query: bool = False) -> str:
    """An https URL (http only to a loopback address: test stand-ins), without credentials;
    returned without a trailing slash."""
    shown = text if len(text) <= 80 else text[:77] + "..."
    if not isinstance(text, str) or len(text) > limit or not _URL_CHARS.fullmatch(text):
        raise UsageError(f"{option} {shown!r} is not a URL of at most {limit} plain characters")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise UsageError(f"{option} {shown!r} is not a valid URL") from None
    if not parts.hostname:
        raise UsageError(f"{option} {shown!r} has no host")
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback(parts.hostname)):
        raise UsageError(f"{option} {shown!r} must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise UsageError(f"{option} must not carry credentials (tokens come from the environment)")
    if parts.fragment or (parts.query and not query):
        raise UsageError(f"{option} {shown!r} must not have a query or fragment")
    return urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def check_repo(kind: str, repo: str | None) -> str:
    if not repo:
        what = "OWNER/REPO" if kind == "github" else "a project id or path (group/project)"
        raise UsageError(f"--ci-runner {kind} needs --ci-repo ({what})")
    shown = repo if len(repo) <= 80 else repo[:77] + "..."
    if kind == "github":
        ok = _GITHUB_REPO.fullmatch(repo) and repo.split("/")[1] not in (".", "..")
        if not ok:
            raise UsageError(f"--ci-repo {shown!r} is not a GitHub OWNER/REPO")
    elif not (_GITLAB_ID.fullmatch(repo) or _GITLAB_PATH.fullmatch(repo)) or len(repo) > 255:
        raise UsageError(f"--ci-repo {shown!r} is not a GitLab project id or path")
    return repo


def token_from_env(kind: str, env: Mapping[str, str]) -> tuple[str, str]:
    """(variable name, token) for `kind`, or UsageError; the token is never shown."""
    names = TOKEN_ENV[kind]
    for name in names:
        value = env.get(name, "").strip()
        if value:
            if not _TOKEN.fullmatch(value):
                raise UsageError(f"${name} is not a token (printable characters, no spaces)")
            return name, value
    raise UsageError(
        f"--ci-runner {kind} needs the caller's token in ${' or $'.join(names)}",
        hint="tokens are read from the environment only",
    )


def from_options(
    kind: str | None,
    repo: str | None,
    ci_url: str | None,
    runner_url: str | None,
    name: str,
    env: Mapping[str, str] | None = None,
) -> CiRunner | None:
    """The validated request, or None without --ci-runner (then the other --ci-* options are
    refused). Raises UsageError; makes no network call."""
    if kind is None:
        given = [o for o, v in (("--ci-repo", repo), ("--ci-url", ci_url)) if v is not None]
        given += ["--runner-url"] * (runner_url is not None)
        if given:
            raise UsageError(f"{given[0]} needs --ci-runner github|gitlab")
        return None
    if kind not in KINDS:
        raise UsageError(f"--ci-runner {kind!r}: choose github or gitlab")
    repo = check_repo(kind, repo)
    api_url = check_url("--ci-url", ci_url or DEFAULT_API_URL[kind], MAX_API_URL)
    runner = check_url(
        "--runner-url", runner_url or DEFAULT_RUNNER_URL[kind], MAX_RUNNER_URL, query=True
    )
    token_env, token = token_from_env(kind, os.environ if env is None else env)
    return CiRunner(kind, repo, api_url, runner, name, token_env, token, runner_url is not None)
