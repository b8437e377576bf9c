"""A stand-in for GitLab's REST API v4, runners created with a runner authentication token:

  GET    /api/v4/projects/:id            200 {id, path_with_namespace}  (id or URL-encoded path)
  POST   /api/v4/user/runners            201 {id, token: "glrt-...", token_expires_at}
         runner_type (instance_type|group_type|project_type), project_id for project_type,
         description, tag_list (string array), run_untagged (boolean); JSON or form body
         (https://docs.gitlab.com/api/users/#create-a-runner-linked-to-a-user)
  DELETE /api/v4/runners/:id             204  (https://docs.gitlab.com/api/runners/)

Checked as the real API does: `PRIVATE-TOKEN` of a known token, else 401
{"message": "401 Unauthorized"}; a token without the scope is 403 {"error":
"insufficient_scope", ...} (create_runner or api to create, manage_runner or api to delete,
read_api or api to read a project); a project the token cannot see is 404
{"message": "404 Project Not Found"}; a missing or bad parameter is 400.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tests.sim.api_standin import Answer, Request, StandIn

RUNNER_TYPES = ("instance_type", "group_type", "project_type")


@dataclass
class Token:
    scopes: set[str]
    projects: set[int]  # project ids the user may create runners for


@dataclass
class GitLabApi(StandIn):
    tokens: dict[str, Token] = field(default_factory=dict)
    projects: dict[int, str] = field(default_factory=dict)  # id -> path_with_namespace
    runners: dict[int, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()
        self._next_id = 9307

    def _insufficient(self, *scopes: str) -> Answer:
        return Answer(
            403,
            {
                "error": "insufficient_scope",
                "error_description": "The request requires higher privileges than provided by "
                "the access token.",
                "scope": " ".join(scopes),
            },
        )

    def answer(self, request: Request) -> Answer:
        token = self.tokens.get(request.headers.get("private-token", ""))
        if token is None:
            return Answer(401, {"message": "401 Unauthorized"})
        path = request.path
        if request.method == "GET" and path.startswith("/api/v4/projects/"):
            return self._project(token, unquote(path.removeprefix("/api/v4/projects/")))
        if request.method == "POST" and path == "/api/v4/user/runners":
            return self._create(token, request.body)
        runner = re.fullmatch(r"/api/v4/runners/(\d+)", path)
        if request.method == "DELETE" and runner:
            if not token.scopes & {"api", "manage_runner"}:
                return self._insufficient("api", "manage_runner")
            if self.runners.pop(int(runner[1]), None) is None:
                return Answer(404, {"message": "404 Runner Not Found"})
            return Answer(204)
        self.violation(f"unknown endpoint {request.method} {path}")
        return Answer(404, {"error": "404 Not Found"})

    def _project(self, token: Token, ref: str) -> Answer:
        if not token.scopes & {"api", "read_api"}:
            return self._insufficient("api", "read_api")
        for project_id, full_path in self.projects.items():
            if ref in (str(project_id), full_path) and project_id in token.projects:
                return Answer(200, {"id": project_id, "path_with_namespace": full_path})
        return Answer(404, {"message": "404 Project Not Found"})

    def _create(self, token: Token, body: Any) -> Answer:
        if not token.scopes & {"api", "create_runner"}:
            return self._insufficient("api", "create_runner")
        if not isinstance(body, dict):
            return Answer(400, {"error": "runner_type is missing"})
        runner_type = body.get("runner_type")
        if runner_type is None:
            return Answer(400, {"error": "runner_type is missing"})
        if runner_type not in RUNNER_TYPES:
            return Answer(400, {"error": "runner_type does not have a valid value"})
        if runner_type != "project_type":
            self.violation(f"runner_type {runner_type}")
            return Answer(403, {"message": "403 Forbidden"})
        project_id = body.get("project_id")
        if isinstance(project_id, str) and project_id.isdigit():
            project_id = int(project_id)  # a form body carries strings
        if not isinstance(project_id, int) or isinstance(project_id, bool):
            return Answer(400, {"error": "project_id is missing"})
        if project_id not in self.projects or project_id not in token.projects:
            return Answer(404, {"message": "404 Project Not Found"})
        tags = body.get("tag_list", [])
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.split(",") if t.strip()]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return Answer(400, {"error": "tag_list is invalid"})
        untagged = body.get("run_untagged", True)
        if isinstance(untagged, str):
            untagged = untagged == "true"
        if not isinstance(untagged, bool):
            return Answer(400, {"error": "run_untagged is invalid"})
        description = body.get("description", "")
        if not isinstance(description, str):
            return Answer(400, {"error": "description is invalid"})
        runner_id = self._next_id
        self._next_id += 1
        secret = "glrt-" + secrets.token_urlsafe(15).replace("-", "x")
        self.runners[runner_id] = {
            "id": runner_id,
            "project_id": project_id,
            "description": description,
            "tag_list": tags,
            "run_untagged": untagged,
            "token": secret,
        }
        return Answer(201, {"id": runner_id, "token": secret, "token_expires_at": None})
