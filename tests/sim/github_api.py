"""A stand-in for GitHub's REST API, self-hosted runners of a repository (version 2022-11-28,
https://docs.github.com/en/rest/actions/self-hosted-runners):

  POST   /repos/{owner}/{repo}/actions/runners/generate-jitconfig  201 {runner, encoded_jit_config}
  GET    /repos/{owner}/{repo}/actions/runners[?name=N]            200 {total_count, runners}
  DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}         204
  GET    /repos/actions/runner/releases/latest                     200 {tag_name, assets}
         (https://docs.github.com/en/rest/releases/releases#get-the-latest-release; public)

generate-jitconfig ("Create configuration for a just-in-time runner for a repository") takes
a JSON body {name, runner_group_id, labels, work_folder?}: name, runner_group_id and labels
(1 to 100 strings) are required, as the reference and its OpenAPI description
(github/rest-api-description) say; a missing or mistyped field is 422 "Invalid request", a
runner group other than the default (1) is 404, a name already registered in the repository
is 409 "Already exists". The runner then exists, offline, and the answer carries it and its
base64 JIT config (here: base64 of a JSON object of the runner's settings and a random
credential, the shape the runner decodes).

Only JIT registration is accepted: POST .../registration-token, which the real API still
serves, is refused here (403 and a violation), so no code path can fall back to a token that
registers any number of runners for an hour.

Checked as the real API does: `Authorization: Bearer T` (or `token T`) of a known token, else
401 {"message": "Bad credentials"}; a repository the token cannot see (or that does not exist)
is 404 {"message": "Not Found"}; a token without the Administration permission on it is 403
{"message": "Resource not accessible by personal access token"}; `X-GitHub-Api-Version` other
than 2022-11-28 is 400. Also checked, as documentation: `Accept: application/vnd.github+json`
(its absence is a violation, not an error: GitHub accepts it).

`register_runner(repo, name)` plays config.sh on the box (a runner appears, offline).
`jit_fault`, when a test sets it, rewrites the body of a 201 generate-jitconfig answer (a
damaged answer, a proxy in between): the runner is registered all the same, as GitHub
registers it before it answers.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.sim.api_standin import Answer, Request, StandIn

DOCS = "https://docs.github.com/rest/actions/self-hosted-runners"
_PATH = re.compile(
    r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/runners"
    r"(?:/(?P<tail>registration-token|generate-jitconfig|\d+))?"
)
_RELEASE_PATH = "/repos/actions/runner/releases/latest"
DEFAULT_GROUP = 1


@dataclass
class Token:
    repos: set[str]  # OWNER/REPO it can see
    admin: bool = True  # Administration: write (may register and delete runners)


@dataclass
class GitHubApi(StandIn):
    tokens: dict[str, Token] = field(default_factory=dict)
    runners: dict[str, list[dict]] = field(default_factory=dict)  # repo -> runners
    jit_configs: dict[int, str] = field(default_factory=dict)  # runner id -> encoded config
    # What releases/latest lists: (tag, linux-x64 tarball URL); None: 404 (as on a GitHub
    # Enterprise Server without the actions/runner repository).
    runner_release: tuple[str, str] | None = None
    # What a 201 generate-jitconfig answer's body becomes (None: as GitHub answers it).
    jit_fault: Callable[[dict[str, Any]], Any] | None = None

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
        if request.path == _RELEASE_PATH and request.method == "GET":
            return self._latest_release()
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
        if tail == "registration-token":
            self.violation("registration-token: this stand-in accepts only JIT registration")
            return Answer(403, {"message": "Only JIT registration is accepted here",
                                "documentation_url": DOCS})  # fmt: skip
        if tail == "generate-jitconfig" and request.method == "POST":
            return self._jit(repo, request.body)
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

    # -- generate-jitconfig and releases/latest

    def _jit(self, repo: str, body: object) -> Answer:
        why = _bad_jit_body(body)
        if why:
            self.violation(f"generate-jitconfig: {why}")
            return Answer(422, {"message": f"Invalid request.\n\n{why}",
                                "documentation_url": DOCS, "status": "422"})  # fmt: skip
        assert isinstance(body, dict)
        if body["runner_group_id"] != DEFAULT_GROUP:
            return Answer(404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})
        if any(r["name"] == body["name"] for r in self.runners.get(repo, [])):
            return Answer(409, {"message": "Already exists - A runner with the name "
                                f"{body['name']} already exists.", "status": "409"})  # fmt: skip
        runner_id = self.register_runner(repo, body["name"], list(body["labels"]))
        runner = next(r for r in self.runners[repo] if r["id"] == runner_id)
        runner["runner_group_id"] = DEFAULT_GROUP
        settings = {"agentId": runner_id, "agentName": body["name"], "poolId": DEFAULT_GROUP,
                    "gitHubUrl": f"https://github.com/{repo}", "ephemeral": True,
                    "workFolder": body.get("work_folder", "_work")}  # fmt: skip
        files = {
            ".runner": _b64(json.dumps(settings)),
            ".credentials": _b64(json.dumps({"scheme": "OAuth",
                                             "data": {"clientId": secrets.token_hex(16)}})),
            ".credentials_rsaparams": _b64(secrets.token_urlsafe(1200)),
        }  # fmt: skip
        config = _b64(json.dumps(files))
        self.jit_configs[runner_id] = config
        answer = {"runner": copy.deepcopy(runner), "encoded_jit_config": config}
        return Answer(201, self.jit_fault(answer) if self.jit_fault else answer)

    def _latest_release(self) -> Answer:
        if self.runner_release is None:
            return Answer(404, {"message": "Not Found", "documentation_url": DOCS})
        tag, url = self.runner_release
        version = tag.lstrip("v")
        assets = [
            {"name": f"actions-runner-osx-x64-{version}.tar.gz",
             "browser_download_url": url.replace("linux-x64", "osx-x64")},
            {"name": f"actions-runner-linux-x64-{version}.tar.gz", "browser_download_url": url},
        ]  # fmt: skip
        return Answer(200, {"tag_name": tag, "name": tag, "assets": assets})


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _bad_jit_body(body: object) -> str | None:
    """Why a generate-jitconfig body breaks the documented shape (None: it does not)."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    unknown = set(body) - {"name", "runner_group_id", "labels", "work_folder"}
    if unknown:
        return f"unknown keys {sorted(unknown)}"
    if not isinstance(body.get("name"), str) or not body["name"]:
        return "object is missing required key: name"
    group = body.get("runner_group_id")
    if not isinstance(group, int) or isinstance(group, bool):
        return "object is missing required key: runner_group_id"
    labels = body.get("labels")
    if not isinstance(labels, list) or not 1 <= len(labels) <= 100:
        return "labels: 1 to 100 names"
    if not all(isinstance(label, str) and label for label in labels):
        return "labels: names are strings"
    if "work_folder" in body and not isinstance(body["work_folder"], str):
        return "work_folder is not a string"
    return None
