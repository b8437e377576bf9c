"""GitHub Actions: a registration token for an ephemeral repository runner, and removing the
runner again at `orch down`.

REST API, version 2022-11-28 ("REST API endpoints for self-hosted runners",
https://docs.github.com/en/rest/actions/self-hosted-runners):
  POST   /repos/{owner}/{repo}/actions/runners/registration-token  -> 201 {token, expires_at}
         (#create-a-registration-token-for-a-repository; the token expires after one hour)
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
# Registration tokens are short upper-case alphanumerics; allow a little more, never shell text.
_REGISTRATION_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,255}")
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


def registration_token(spec: CiRunner) -> tuple[str, str]:
    """(registration token, expires_at) for an ephemeral runner of spec.repo."""
    answer = call(
        "POST", f"{_repo_path(spec.api_url, spec.repo)}/registration-token", headers(spec.token)
    )
    if answer.status != 201:
        raise refused(answer, spec.repo, spec.token_env)
    body: Any = answer.body
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not _REGISTRATION_TOKEN.fullmatch(token):
        raise OrchError(f"GitHub answered the registration for {spec.repo} without a token")
    return token, str(body.get("expires_at") or "")


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
