"""CI-native boxes: `orch up --ci-runner github|gitlab` registers the box as an ephemeral
self-hosted runner of a repository, labelled orch-BOX; the runner takes one job and the box
powers itself off (docs/ci.md, "CI-native boxes").

  common.py    the --ci-* options and the caller's token (environment only), validated
  github.py    GitHub's JIT runner and newest runner release, and removing the runner at `down`
  deliver.py   the JIT config, over SSH into the box once it is up (never in user data)
  gitlab.py    GitLab's runner (glrt- token), and deleting it at `down`
  userdata.py  the box-side shell section of the user data
  http.py      one JSON request with urllib

Order in `up`: options validated with the others (no network) -> after the plan is validated,
registration (a refused token creates nothing) -> Terraform with the section in the user
data -> GitHub: the JIT config over SSH. The box record keeps what `down` needs (kind, API
URL, repo, runner name and id), never a token or config.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.ci_runner import deliver, github, gitlab
from orchestrator.ci_runner.common import (
    DEFAULT_API_URL,
    KINDS,
    LABEL_PREFIX,
    CiRunner,
    check_repo,
    check_url,
    from_options,
    token_from_env,
)
from orchestrator.ci_runner.userdata import render_section
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision.boxes import validate_box_name
from orchestrator.provision.request import UpRequest

__all__ = ["CiRunner", "Registration", "forget", "from_options", "json_fields", "registered"]

Say = Callable[[str], None]
# A stand-in runner token of the longest length expected, for the size check before
# registering (GitLab's glrt- tokens; GitHub's JIT config never goes into user data).
_PLACEHOLDER_TOKEN = "X" * 64
_PLACEHOLDER_EXPIRY = "2000-01-01T00:00:00Z"
# `orch down` of a box rebuilt from a state bucket sends the caller's token only to the
# default API of its kind, or to this URL: whoever can write the bucket wrote that record.
TRUSTED_URL_ENV = "ORCH_CI_URL"


@dataclass(frozen=True, slots=True)
class Registration:
    """A registered runner: what the box record keeps, and its secret: GitLab's runner token
    (for the user data), or GitHub's JIT config (handed over SSH once the box is up)."""

    spec: CiRunner
    record: dict[str, Any]
    runner_token: str = field(repr=False)
    runner_url: str = ""  # where the box downloads the runner ("": spec.runner_url)

    def user_data(self, ssh_user: str) -> str:
        """The box-side section for a box whose login user is `ssh_user`."""
        token = "" if self.spec.kind == "github" else self.runner_token
        return section_for(self.spec, token, ssh_user, self.runner_url)


def section_for(spec: CiRunner, runner_token: str, ssh_user: str, runner_url: str = "") -> str:
    server = (
        f"{github.web_url(spec.api_url)}/{spec.repo}" if spec.kind == "github" else spec.api_url
    )
    return render_section(
        spec.kind,
        runner_url or spec.runner_url,
        runner_token,
        server,
        spec.name,
        spec.label,
        ssh_user,
    )


def runner_url_for(spec: CiRunner, say: Say) -> str:
    """Where the box downloads the runner: --runner-url as given; for GitHub otherwise the
    newest release (the pinned default when that cannot be told)."""
    if spec.kind != "github" or spec.runner_url_chosen:
        return spec.runner_url
    latest = github.latest_runner_url(spec)
    if latest is None:
        say(f"could not find the newest GitHub runner release; the box starts from "
            f"{spec.runner_url} and updates itself")  # fmt: skip
    return latest or spec.runner_url


def check_fits(spec: CiRunner, plan: Any, runner_url: str = "") -> None:
    """UsageError when the user data with this section would pass the 16 KB limit, for any
    candidate of `plan` (checked with a stand-in token, before registering anything)."""
    from orchestrator.provision.userdata import USER_DATA_LIMIT, render_user_data

    token = "" if spec.kind == "github" else _PLACEHOLDER_TOKEN
    for candidate in plan.candidates():
        section = section_for(spec, token, candidate.ssh_user, runner_url)
        try:
            render_user_data(_PLACEHOLDER_EXPIRY, candidate.cloud, section)
        except OrchError as exc:
            raise UsageError(
                f"the CI runner section does not fit in the user data ({exc.message})",
                hint=f"use a shorter --runner-url (at most {USER_DATA_LIMIT} bytes in all)",
            ) from None


def register(spec: CiRunner, runner_url: str = "") -> Registration:
    """Register the runner with GitHub (a JIT runner) or GitLab (network). Raises UsageError
    for a token or repository the API refuses, OrchError when it does not answer."""
    record: dict[str, Any] = {
        "kind": spec.kind,
        "api_url": spec.api_url,
        "repo": spec.repo,
        "name": spec.name,
        "label": spec.label,
    }
    if spec.kind == "github":
        runner_id, token = github.jit_config(spec)
        record["runner_id"] = runner_id
    else:
        project = gitlab.project_id(spec)
        runner_id, token = gitlab.create_runner(spec, project)
        record.update(project_id=project, runner_id=runner_id)
    return Registration(spec, record, token, runner_url or spec.runner_url)


@contextlib.contextmanager
def registered(spec: CiRunner | None, request: UpRequest, say: Say) -> Iterator[UpRequest]:
    """Around `launch.up`: register first (so a refused token creates nothing) and give back
    `request` with the registration (its user-data section and box record) added; without a
    runner, `request` itself. If `up` fails and the box record does not keep the
    registration, the runner is deleted again; a GitHub runner whose config cannot be handed
    to the box is deleted too. After a successful re-run of a failed box, its earlier runner
    is deleted (a GitHub one first: a JIT runner holds its name until it is removed)."""
    if spec is None:
        yield request
        return
    runner_url = runner_url_for(spec, say)
    check_fits(spec, request.plan, runner_url)
    token = (spec.token_env, spec.token)
    previous = _recorded(spec.name)
    if previous and previous.get("kind") == "github" and _failed(spec.name):
        forget(previous, say, token=token)
        previous = None
    registration = register(spec, runner_url)
    say(f"registered a {spec.kind} runner for {spec.repo} with label {spec.label}")
    try:
        yield replace(request, ci_runner=registration)
    except BaseException:
        if _recorded(spec.name) != registration.record and registration.record.get("runner_id"):
            forget(registration.record, say, token=token)
        raise
    if spec.kind == "github":
        try:
            deliver.deliver_jit_config(spec.name, registration.runner_token)
        except BaseException:
            forget(registration.record, say, token=token)
            raise
    if previous and previous.get("runner_id") and previous != registration.record:
        forget(previous, say, token=token)


def _failed(name: str) -> bool:
    from orchestrator.provision.boxes import load_box

    with contextlib.suppress(OrchError):
        return load_box(name).state == "failed"
    return False


def _recorded(name: str) -> dict[str, Any] | None:
    from orchestrator.provision.boxes import box_exists, load_box

    with contextlib.suppress(OrchError):
        if box_exists(name):
            return load_box(name).ci_runner
    return None


def json_fields(box: Any) -> dict[str, Any]:
    """`up --json`'s ci_runner object: {kind, label, repo, runner_id?}; {} without one."""
    record = getattr(box, "ci_runner", None)
    if not record:
        return {}
    shown = {k: record.get(k) for k in ("kind", "label", "repo")}
    if record.get("runner_id") is not None:
        shown["runner_id"] = record["runner_id"]
    return {"ci_runner": shown}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _warn(message: str) -> None:
    print(f"orch: warning: {message}", file=sys.stderr)


def forget(
    record: Mapping[str, Any],
    say: Say,
    token: tuple[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> bool:
    """At `orch down`: remove the box's runner registration if it is still there (GitHub: a
    runner that never took a job; GitLab: the runner). Best effort: a missing token, a refusal
    or no answer is a warning, never a failure of `down`. Returns whether the API was asked."""
    env = os.environ if env is None else env
    kind = record.get("kind")
    try:
        if kind not in KINDS:
            raise UsageError(f"unknown kind {kind!r}")
        api_url = check_url("the recorded API URL", str(record.get("api_url")), 200)
        repo = check_repo(kind, str(record.get("repo") or ""))
        name = validate_box_name(str(record.get("name")))
    except UsageError as exc:
        _warn(f"the box's CI runner record is damaged ({exc.message}); not removing it")
        return False
    trusted = {DEFAULT_API_URL[kind], env.get(TRUSTED_URL_ENV, "").rstrip("/")}
    if record.get("from_bundle") and api_url not in trusted:
        _warn(
            f"not sending your token to {api_url}, named by the box bundle in the state bucket; "
            f"set {TRUSTED_URL_ENV}={api_url} if it is yours, or remove the runner there"
        )
        return False
    where = f"{kind} runner {LABEL_PREFIX}{name} of {repo}"
    try:
        token_env, secret = token or token_from_env(kind, env)
    except UsageError as exc:
        _warn(f"{exc.message}: the {where} was not removed")
        return False
    try:
        runner_id = record.get("runner_id")
        if kind == "github" and _whole(runner_id):
            removed = github.remove_runner_id(api_url, repo, int(runner_id), secret, token_env)
        elif kind == "github":  # a record from before JIT runners: by name
            removed = github.remove_runner(api_url, repo, name, secret, token_env)
        else:
            if not _whole(runner_id):
                raise UsageError("no runner id recorded")
            removed = int(gitlab.delete_runner(api_url, runner_id, secret, token_env))
    except OrchError as exc:
        _warn(f"could not remove the {where}: {exc.one_line()}")
        return True
    say(f"removed the {where}" if removed else f"the {where} was gone already")
    return True
