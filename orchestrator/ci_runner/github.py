"""GitHub Actions: a just-in-time (JIT) runner of a repository, the runner release to start
it from, and removing the runner again at `orch down`.

REST API, version 2022-11-28 ("REST API endpoints for self-hosted runners",
https://docs.github.com/en/rest/actions/self-hosted-runners):
  POST   /repos/{owner}/{repo}/actions/runners/generate-jitconfig
         body {name, runner_group_id, labels (1 to 100), work_folder}
         -> 201 {runner: {id, name, os, status, busy, labels, ...}, encoded_jit_config}
         (#create-configuration-for-a-just-in-time-runner-for-a-repository; 404 unknown
         repository or runner group, 409 a runner of that name exists, 422 a bad body).
         The runner exists (offline) from then on; `./run.sh --jitconfig CONFIG` starts it, it
         takes one job and GitHub removes it. The config registers this one runner only,
         unlike a registration token (registration-token), which registers any number of
         runners for an hour.
  GET    /repos/actions/runner/releases/latest                     -> 200 {tag_name, assets}
         (https://docs.github.com/en/rest/releases/releases#get-the-latest-release)
  GET    /repos/{owner}/{repo}/actions/runners?name=NAME           -> 200 {total_count, runners}
         (#list-self-hosted-runners-for-a-repository)
  DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}         -> 204
         (#delete-a-self-hosted-runner-from-a-repository)
Headers: Authorization: Bearer TOKEN, Accept: application/vnd.github+json,
X-GitHub-Api-Version: 2022-11-28 (https://docs.github.com/en/rest/using-the-rest-api/
getting-started-with-the-rest-api). Fine-grained tokens need "Administration" repository
permissions (write); classic tokens the repo scope.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from orchestrator.ci_runner.common import CiRunner
from orchestrator.ci_runner.http import Answer, call
from orchestrator.errors import OrchError, UsageError

API_VERSION = "2022-11-28"
# The encoded JIT config is base64 (of a JSON object of the runner's settings and its
# credentials, some 2 to 4 KB); never shell text.
JIT_CONFIG_MAX = 8192
_JIT_CONFIG = re.compile(rf"[A-Za-z0-9+/]{{16,{JIT_CONFIG_MAX}}}={{0,2}}")
DEFAULT_RUNNER_GROUP = 1  # "Default": every repository has it; the API has no default value
WORK_FOLDER = "_work"  # the runner's default, relative to its directory
# The release asset a linux-x64 box runs (https://github.com/actions/runner/releases).
_ASSET = re.compile(r"actions-runner-linux-x64-[0-9]+\.[0-9]+\.[0-9]+\.tar\.gz")
SCOPE_HINT = (
    "a fine-grained token needs Administration: write on the repository; a classic one the "
    "repo scope"
)


def headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
    }


def web_url(api_url: str) -> str:
    """The server the runner's config.sh registers with: github.com for api.github.com, the
    host of a GitHub Enterprise Server API (https://HOST/api/v3), else the base itself."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    path = parts.path.rstrip("/")
    path = path[: -len("/api/v3")] if path.endswith("/api/v3") else path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _repo_path(api_url: str, repo: str) -> str:
    owner, name = repo.split("/", 1)
    return f"{api_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}/actions/runners"


def refused(answer: Answer, repo: str, token_env: str) -> OrchError:
    said = f" ({answer.status} {answer.message()})".replace(" )", ")")
    if answer.status == 401:
        return UsageError(f"GitHub refused the token in ${token_env}{said}")
    if answer.status == 403:
        return UsageError(
            f"the token in ${token_env} may not manage runners of {repo}{said}", hint=SCOPE_HINT
        )
    if answer.status == 404:
        return UsageError(f"GitHub repository {repo} not found, or the token cannot see it{said}")
    if 400 <= answer.status < 500:
        return UsageError(f"GitHub refused the runner registration for {repo}{said}")
    return OrchError(f"GitHub failed the runner registration for {repo}{said}")


def jit_config(spec: CiRunner) -> tuple[int, str]:
    """(runner id, encoded JIT config) of a new runner of spec.repo named spec.name, with the
    one custom label spec.label, in the default runner group."""
    body = {
        "name": spec.name,
        "runner_group_id": DEFAULT_RUNNER_GROUP,
        "labels": [spec.label],
        "work_folder": WORK_FOLDER,
    }
    url = f"{_repo_path(spec.api_url, spec.repo)}/generate-jitconfig"
    answer = call("POST", url, headers(spec.token), body)
    if answer.status == 409:
        raise UsageError(
            f"GitHub already has a runner named {spec.name} in {spec.repo} ({answer.message()})",
            hint=f"`orch down {spec.name}` removes an unused one; or choose another --name",
        )
    if answer.status != 201:
        raise refused(answer, spec.repo, spec.token_env)
    data: Any = answer.body if isinstance(answer.body, dict) else {}
    runner = data.get("runner") if isinstance(data.get("runner"), dict) else {}
    runner_id, config = runner.get("id"), data.get("encoded_jit_config")
    if not _is_runner_id(runner_id):
        raise _unusable(spec, None, "without a runner id")
    if not isinstance(config, str) or not _JIT_CONFIG.fullmatch(config):
        raise _unusable(spec, runner_id, "without a config")
    return runner_id, config


def _is_runner_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _unusable(spec: CiRunner, runner_id: int | None, what: str) -> OrchError:
    """The error for a 201 answer orch cannot use. GitHub has registered the runner by then
    (offline, holding its name), so it is removed first: by the answer's id when that is
    usable ("Delete a self-hosted runner from a repository", DELETE .../runners/{runner_id}
    -> 204), else found by its name ("List self-hosted runners for a repository", GET
    .../runners?name=NAME: the `name` query parameter) and deleted by the id listed
    (https://docs.github.com/en/rest/actions/self-hosted-runners, version 2022-11-28). The
    name was free (else 409), so the one runner it names is the one just registered."""
    said = f"GitHub answered the JIT registration for {spec.repo} {what}"
    try:
        if runner_id is not None:
            removed = remove_runner_id(
                spec.api_url, spec.repo, runner_id, spec.token, spec.token_env
            )
        else:
            removed = remove_runner(spec.api_url, spec.repo, spec.name, spec.token, spec.token_env)
    except OrchError as exc:
        return OrchError(
            f"{said}, and removing its runner {spec.name} again failed: {exc.one_line()}",
            hint=f"delete runner {spec.name} under the repository's Settings > Actions > Runners",
        )
    if not removed:
        return OrchError(f"{said}; GitHub has no runner {spec.name} to remove")
    return OrchError(f"{said}; its runner {spec.name} was removed again")


def latest_runner_url(spec: CiRunner) -> str | None:
    """The linux-x64 tarball of the newest actions/runner release, as spec.api_url lists it;
    None when it does not (GitHub Enterprise Server without the repository, no answer)."""
    from orchestrator.ci_runner.common import MAX_RUNNER_URL, check_url

    try:
        answer = call(
            "GET", f"{spec.api_url}/repos/actions/runner/releases/latest", headers(spec.token)
        )
    except OrchError:
        return None
    assets = answer.body.get("assets") if isinstance(answer.body, dict) else None
    if answer.status != 200 or not isinstance(assets, list):
        return None
    for asset in assets:
        if isinstance(asset, dict) and _ASSET.fullmatch(str(asset.get("name"))):
            try:
                return check_url("the latest runner release", str(
                    asset.get("browser_download_url")), MAX_RUNNER_URL)  # fmt: skip
            except UsageError:
                return None
    return None


def remove_runner_id(api_url: str, repo: str, runner_id: int, token: str, token_env: str) -> int:
    """Delete runner `runner_id` of `repo` (the one JIT registration made: never another
    runner of the same name). Returns 1 when deleted, 0 when it was gone already."""
    gone = call("DELETE", f"{_repo_path(api_url, repo)}/{int(runner_id)}", headers(token))
    if gone.status not in (204, 404):  # 404: it ran its job and removed itself
        raise refused(gone, repo, token_env)
    return int(gone.status == 204)


def remove_runner(api_url: str, repo: str, name: str, token: str, token_env: str) -> int:
    """Delete the runners of `repo` named `name` (one that never took a job: an ephemeral
    runner that ran its job has removed itself). Returns how many were deleted."""
    base = _repo_path(api_url, repo)
    answer = call("GET", f"{base}?name={quote(name, safe='')}", headers(token))
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise refused(answer, repo, token_env)
    runners = answer.body.get("runners") or []
    removed = 0
    for runner in runners:
        if not isinstance(runner, dict) or runner.get("name") != name:
            continue
        runner_id = runner.get("id")
        if not isinstance(runner_id, int) or isinstance(runner_id, bool):
            continue
        gone = call("DELETE", f"{base}/{runner_id}", headers(token))
        if gone.status not in (204, 404):  # 404: it removed itself meanwhile
            raise refused(gone, repo, token_env)
        removed += gone.status == 204
    return removed
