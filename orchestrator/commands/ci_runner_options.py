"""`orch up`'s --ci-runner options (CI-native boxes, docs/ci.md). The logic is in
orchestrator/ci_runner; the caller's token is read from the environment, never an option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from orchestrator.ci_runner import CiRunner, from_options

F = Callable[..., Any]
KEYS = ("ci_runner", "ci_repo", "ci_url", "runner_url")


def ci_runner_options(function: F) -> F:
    options = [
        click.option(
            "--ci-runner",
            "ci_runner",
            type=click.Choice(["github", "gitlab"]),
            help="Register the box as an ephemeral runner of --ci-repo, labelled orch-NAME: it"
            " runs one job, then powers off. Token from $GH_TOKEN/$GITHUB_TOKEN or"
            " $GITLAB_TOKEN.",
        ),
        click.option(
            "--ci-repo",
            metavar="REPO",
            help="GitHub OWNER/REPO, or GitLab project id or path (group/project).",
        ),
        click.option(
            "--ci-url",
            metavar="URL",
            help="API base: default https://api.github.com (GitHub Enterprise:"
            " https://HOST/api/v3), https://gitlab.com (self-managed: its URL).",
        ),
        click.option(
            "--runner-url",
            metavar="URL",
            help="Where the box downloads the runner (default: the pinned official release;"
            " point it at a mirror).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def runner_from_options(kwargs: dict[str, Any], name: str) -> CiRunner | None:
    """Take the --ci-* values out of `kwargs`; the validated request or None (no network)."""
    values = {key: kwargs.pop(key, None) for key in KEYS}
    return from_options(
        values["ci_runner"], values["ci_repo"], values["ci_url"], values["runner_url"], name
    )
