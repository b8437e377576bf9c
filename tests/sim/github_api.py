"""A stand-in for GitHub's REST API, self-hosted runners of a repository (version 2022-11-28,
https://docs.github.com/en/rest/actions/self-hosted-runners):

  POST   /repos/{owner}/{repo}/actions/runners/registration-token  201 {token, expires_at}
  GET    /repos/{owner}/{repo}/actions/runners[?name=N]            200 {total_count, runners}
  DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}         204

Checked as the real API does: `Authorization: Bearer T` (or `token T`) of a known token, else
401 {"message": "Bad credentials"}; a repository the token cannot see (or that does not exist)
is 404 {"message": "Not Found"}; a token without the Administration permission on it is 403
{"message": "Resource not accessible by personal access token"}; `X-GitHub-Api-Version` other
than 2022-11-28 is 400. Also checked, as documentation: `Accept: application/vnd.github+json`
(its absence is a violation, not an error: GitHub accepts it).

`register_runner(repo, name)` plays config.sh on the box (a runner appears, offline).
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tests.sim.api_standin import Answer, Request, StandIn

DOCS = "https://docs.github.com/rest/actions/self-hosted-runners"
_PATH = re.compile(
    r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/runners"
    r"(?:/(?P<tail>registration-token|\d+))?"
)


@dataclass
class Token:
    repos: set[str]  # OWNER/REPO it can see
    admin: bool = True  # Administration: write (may register and delete runners)


@dataclass
class GitHubApi(StandIn):
    tokens: dict[str, Token] = field(default_factory=dict)
    runners: dict[str, list[dict]] = field(default_factory=dict)  # repo -> runners
    registration_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._next_id = 23

    def register_runner(self, repo: str, name: str, labels: list[str] | None = None) -> int:
        runner_id = self._next_id
        self._next_id += 1
        self.runners.setdefault(repo, []).append(
            {
                "id": runner_id,
                "name": name,
                "os": "linux",
                "status": "offline",
                "busy": False,
                "labels": [
                    {"id": 1, "name": n, "type": "read-only" if n == "self-hosted" else "custom"}
                    for n in ["self-hosted", *(labels or [])]
                ],
            }
        )
        return runner_id

    def answer(self, request: Request) -> Answer:
        match = _PATH.fullmatch(request.path)
        if match is None:
            self.violation(f"unknown path {request.method} {request.path}")
            return Answer(404, {"message": "Not Found", "documentation_url": DOCS})
        version = request.headers.get("x-github-api-version")
        if version != "2022-11-28":
            self.violation(f"X-GitHub-Api-Version {version!r}")
            if version is not None:
                return Answer(400, {"message": f"Unsupported 'X-GitHub-Api-Version': {version}"})
        if request.headers.get("accept") != "application/vnd.github+json":
            self.violation(f"Accept {request.headers.get('accept')!r}")
        auth = request.headers.get("authorization", "")
        scheme, _, secret = auth.partition(" ")
        token = self.tokens.get(secret) if scheme.lower() in ("bearer", "token") else None
        if token is None:
            message = "Bad credentials" if auth else "Requires authentication"
            return Answer(401, {"message": message, "documentation_url": DOCS, "status": "401"})
        repo = f"{match['owner']}/{match['repo']}"
        if repo not in token.repos:
            return Answer(404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})
        if not token.admin:
            return Answer(
                403,
                {
                    "message": "Resource not accessible by personal access token",
                    "documentation_url": DOCS,
                    "status": "403",
                },
            )
        tail = match["tail"]
        if tail == "registration-token" and request.method == "POST":
            if request.raw:
                self.violation("registration-token takes no body")
            value = "".join(
                secrets.choice(string.ascii_uppercase + string.digits) for _ in "x" * 29
            )
            self.registration_tokens.append(value)
            expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            return Answer(201, {"token": value, "expires_at": expires})
        if tail is None and request.method == "GET":
            runners = self.runners.get(repo, [])
            name = (request.query.get("name") or [None])[-1]
            if name is not None:
                runners = [r for r in runners if r["name"] == name]
            return Answer(200, {"total_count": len(runners), "runners": runners})
        if tail and tail.isdigit() and request.method == "DELETE":
            listed = self.runners.get(repo, [])
            for runner in listed:
                if runner["id"] == int(tail):
                    listed.remove(runner)
                    return Answer(204)
            return Answer(404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})
        self.violation(f"method {request.method} on {request.path}")
        return Answer(404, {"message": "Not Found", "documentation_url": DOCS})
