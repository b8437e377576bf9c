"""`orch completion bash|zsh|fish`: the shell completion script, from click's own support.

The script calls `orch` back with `_ORCH_COMPLETE=<shell>_complete`; click answers those
calls before any command runs (orchestrator/click_group.py), completing sub-commands,
options and choices such as `--cloud` and `--precision`.
"""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_ORCH_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; load it in your shell's start-up file.

    \b
    Examples:
      orch completion bash    in ~/.bashrc: eval "$(orch completion bash)" (bash >= 4.4)
      orch completion zsh     in ~/.zshrc: eval "$(orch completion zsh)"
      orch completion fish    > ~/.config/fish/completions/orch.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # click knows all three; a newer click might drop one
        raise click.UsageError(f"click has no completion for {shell}")
    root = click.get_current_context().find_root().command  # the `orch` group
    click.echo(completer(root, {}, "orch", COMPLETE_VAR).source(), nl=False)
