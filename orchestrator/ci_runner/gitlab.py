"""GitLab: a project runner with a runner authentication token (glrt-...), and deleting it at
`orch down`.

REST API v4, header PRIVATE-TOKEN (https://docs.gitlab.com/api/rest/authentication/):
  GET    /api/v4/projects/:id (id or URL-encoded path)  -> 200 {id, ...}
         (https://docs.gitlab.com/api/projects/#get-a-single-project; only for a path)
  POST   /api/v4/user/runners  runner_type=project_type, project_id, description, tag_list,
         run_untagged  -> 201 {id, token, token_expires_at}
         (https://docs.gitlab.com/api/users/#create-a-runner-linked-to-a-user; scope
         create_runner, https://docs.gitlab.com/user/profile/personal_access_tokens/#personal-access-token-scopes)
  DELETE /api/v4/runners/:id  -> 204
         (https://docs.gitlab.com/api/runners/#delete-a-runner-by-id; scope manage_runner or api)
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from orchestrator.ci_runner.common import CiRunner
from orchestrator.ci_runner.http import Answer, call
from orchestrator.errors import OrchError, UsageError

_RUNNER_TOKEN = re.compile(r"glrt-[A-Za-z0-9_.-]{1,250}")
SCOPE_HINT = "the token needs the create_runner scope (manage_runner to delete it at down)"


def headers(token: str) -> dict[str, str]:
    return {"PRIVATE-TOKEN": token, "Accept": "application/json"}


def refused(answer: Answer, what: str, token_env: str) -> OrchError:
    said = f" ({answer.status} {answer.message()})".replace(" )", ")")
    if answer.status == 401:
        return UsageError(f"GitLab refused the token in ${token_env}{said}")
    if answer.status == 403:
        return UsageError(f"the token in ${token_env} may not {what}{said}", hint=SCOPE_HINT)
    if answer.status == 404:
        return UsageError(f"GitLab cannot {what}: not found, or the token cannot see it{said}")
    if 400 <= answer.status < 500:
        return UsageError(f"GitLab refused to {what}{said}")
    return OrchError(f"GitLab failed to {what}{said}")


def project_id(spec: CiRunner) -> int:
    """--ci-repo as GitLab's numeric project id (a path is looked up)."""
    if spec.repo.isdigit():
        return int(spec.repo)
    what = f"read project {spec.repo}"
    answer = call(
        "GET", f"{spec.api_url}/api/v4/projects/{quote(spec.repo, safe='')}", headers(spec.token)
    )
    found: Any = answer.body.get("id") if isinstance(answer.body, dict) else None
    if answer.status != 200:
        raise refused(answer, what, spec.token_env)
    if not isinstance(found, int) or isinstance(found, bool) or found <= 0:
        raise OrchError(f"GitLab answered {what} without a project id")
    return found


def create_runner(spec: CiRunner, project: int) -> tuple[int, str]:
    """(runner id, runner authentication token) of a new project runner tagged spec.label that
    takes tagged jobs only."""
    what = f"create a runner for project {spec.repo}"
    body = {
        "runner_type": "project_type",
        "project_id": project,
        "description": f"orch {spec.name}",
        "tag_list": [spec.label],
        "run_untagged": False,
    }
    answer = call("POST", f"{spec.api_url}/api/v4/user/runners", headers(spec.token), body)
    if answer.status != 201:
        raise refused(answer, what, spec.token_env)
    data: Any = answer.body if isinstance(answer.body, dict) else {}
    runner_id, token = data.get("id"), data.get("token")
    if not isinstance(runner_id, int) or isinstance(runner_id, bool) or runner_id <= 0:
        raise OrchError(f"GitLab answered {what} without a runner id")
    if not isinstance(token, str) or not _RUNNER_TOKEN.fullmatch(token):
        # The runner exists now: delete it again rather than leave it behind.
        delete_runner(spec.api_url, runner_id, spec.token, spec.token_env)
        raise OrchError(f"GitLab answered {what} without a glrt- runner token")
    return runner_id, token


def delete_runner(api_url: str, runner_id: int, token: str, token_env: str) -> bool:
    """Delete runner `runner_id`; False when it was gone already."""
    answer = call("DELETE", f"{api_url}/api/v4/runners/{int(runner_id)}", headers(token))
    if answer.status == 404:
        return False
    if answer.status != 204:
        raise refused(answer, f"delete runner {runner_id}", token_env)
    return True
