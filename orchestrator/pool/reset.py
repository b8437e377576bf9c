"""Make a pool box as good as new between leases: end the last lease's processes, remove what
it left in the login user's home, mark a new baseline, and check the GPUs again.

"What it left" is measured against a baseline file written when the box became ready: files
newer than it are removed, then folders newer than it that are left empty; ~/.ssh is never
touched (the box's authorized key lives there). "Its processes" are the run units and process
groups `orch run` recorded, then every other process of the login whose HOME is this home,
except the resetting shell and its ancestors. A box that fails any step is destroyed by the
caller, never handed out again.
"""

from __future__ import annotations

from orchestrator.check.transport import SshTransport
from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box

BASELINE = ".orch-pool-baseline"

RESET_SH = r"""set -u
baseline="$HOME/.orch-pool-baseline"
[ -f "$baseline" ] || { echo "no baseline: not a pool box" >&2; exit 3; }
for d in "$HOME"/.orch/runs/*/; do
  [ -d "$d" ] || continue
  unit=$(cat "$d/unit" 2>/dev/null || true)
  if [ -n "$unit" ]; then sudo -n systemctl kill --signal=KILL "$unit" 2>/dev/null || true; fi
  pid=$(cat "$d/pid" 2>/dev/null || echo 0)
  case "$pid" in ''|*[!0-9]*) pid=0 ;; esac
  if [ "$pid" -gt 1 ]; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi
done
# This shell's own pid: $$ names the parent when the script runs in a subshell.
me=$(exec sh -c 'echo "$PPID"')
keep=" $$ $me "
p=$me
while [ "$p" -gt 1 ]; do
  p=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
  [ -n "$p" ] || break
  keep="$keep$p "
done
for e in /proc/[0-9]*/environ; do
  pid=${e#/proc/}
  pid=${pid%/environ}
  case "$keep" in *" $pid "*) continue ;; esac
  [ -O "/proc/$pid" ] || continue
  if tr '\0' '\n' 2>/dev/null < "$e" | grep -qxF "HOME=$HOME"; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
done
rm -rf "$HOME/.orch" "$HOME/orch"
find "$HOME" -mindepth 1 -path "$HOME/.ssh" -prune -o ! -type d -newer "$baseline" -print0 \
  | xargs -0 -r rm -f --
find "$HOME" -mindepth 1 -depth -path "$HOME/.ssh" -prune -o -type d -newer "$baseline" \
  -empty -print0 | xargs -0 -r rmdir -- 2>/dev/null
touch "$baseline"
echo reset-ok
"""

BASELINE_SH = 'touch "$HOME/.orch-pool-baseline" && echo baseline-ok'


def mark_baseline(transport: SshTransport) -> None:
    """Called once a new box passed its check: what exists now belongs to the image."""
    from orchestrator.run.shell import call_ok

    call_ok(transport, BASELINE_SH, what="marking the pool box's baseline", retry_s=60)


def reset_box(box: Box, transport: SshTransport, ssh_config: str | None, timeout: float) -> None:
    """Reset the box and check its GPUs again; OrchError when either fails."""
    from orchestrator.check.untrusted import printable
    from orchestrator.check.verify import check_box
    from orchestrator.run.shell import call_ok

    out = call_ok(transport, RESET_SH, what=f"resetting box {box.name}", timeout=120, retry_s=30)
    if "reset-ok" not in out:
        raise OrchError(f"resetting box {box.name} did not finish")
    report = check_box(box, ssh_config=ssh_config, timeout=timeout)
    if not report.ok:
        problems = "; ".join(printable(c.message) for c in report.failures())
        raise OrchError(f"box {box.name} failed its check after the reset: {problems}")
