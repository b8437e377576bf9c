"""The job's wrapper: the shell script that runs ON the box as job.sh in the run's folder.

orch writes it there with the run's other files (orchestrator/run/remote.py's prepare_script,
which documents the folder's layout) and starts it detached (launch_script): it runs setup,
then the command, restores and watches checkpoints with the agent (agent.py, next to it), and
writes `exit` last.
"""

from __future__ import annotations

# The wrapper. `exit` is written atomically (rename) and last, so a reader that sees it sees
# the final status; a TERM reaches the running step with its group, and its status is kept.
JOB_SH = r"""#!/bin/bash
# orch run: the job's wrapper on the box (orchestrator/boxside/wrapper.py, written by orch).
set -u
run_dir=$1
if [ -n "${ORCH_PATH:-}" ]; then export PATH="$ORCH_PATH"; fi
unset ORCH_PATH
# The job's environment values: read, then deleted before the pid tells orch the job runs.
if [ -f "$run_dir/env" ]; then . "$run_dir/env"; rm -f "$run_dir/env"; fi
echo "$$" > "$run_dir/pid.tmp" && mv -f "$run_dir/pid.tmp" "$run_dir/pid"
child=""
agent=""
finish() {
  rm -f "$run_dir/env"
  if [ -n "$agent" ]; then
    kill -TERM "$agent" 2>/dev/null
    wait "$agent"
    # A trapped signal ends `wait` early (status > 128): wait for the agent's own status.
    agent_rc=$?
    while kill -0 "$agent" 2>/dev/null; do wait "$agent"; agent_rc=$?; done
    echo "$agent_rc" > "$run_dir/agent.exit"
  fi
  # Into the space prepare reserved (exit.reserve: newlines), in place: a full disk cannot
  # refuse it. Without the reserve (an older prepare), a new file as before.
  if [ -f "$run_dir/exit.reserve" ] \
    && printf '%s %s\n' "$1" "$2" 1<> "$run_dir/exit.reserve" \
    && mv -f "$run_dir/exit.reserve" "$run_dir/exit"; then :
  else
    printf '%s %s\n' "$1" "$2" > "$run_dir/exit.tmp" && mv -f "$run_dir/exit.tmp" "$run_dir/exit"
  fi
  exit 0
}
# `orch stop` signals the whole process group (systemd: every process of the unit), so the
# step already has its TERM: the wrapper only survives it, to keep the step's status. Passing
# it on as well would hand the step a second TERM while its handler runs.
trap ':' TERM INT HUP
step() {
  bash "$1" </dev/null &
  child=$!
  wait "$child"
  rc=$?
  # A trapped signal ends `wait` early (status > 128): wait again for the step's own status.
  while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
  child=""
  return "$rc"
}
cd "$ORCH_WORKDIR" || finish 126 workdir
if [ -f "$run_dir/setup.sh" ]; then
  step "$run_dir/setup.sh"
  rc=$?
  if [ "$rc" -ne 0 ]; then finish "$rc" setup; fi
fi
export ORCH_RESUMED=0
if [ -n "${ORCH_STORE:-}" ]; then
  mkdir -p "$ORCH_CHECKPOINT_DIR"
  restored=$(python3 "$run_dir/agent.py" restore --dir "$ORCH_CHECKPOINT_DIR" \
    --store "$ORCH_STORE" --cloud "$ORCH_CLOUD_NAME") || finish 1 restore
  echo "$restored"
  case "$restored" in *"orch-agent: restored"*) ORCH_RESUMED=1 ;; esac
  # A cluster's nodes all restore; rank 0 alone uploads (ORCH_CHECKPOINT_UPLOAD=0 elsewhere).
  if [ "${ORCH_CHECKPOINT_UPLOAD:-1}" = 1 ]; then
    python3 "$run_dir/agent.py" watch --dir "$ORCH_CHECKPOINT_DIR" --store "$ORCH_STORE" \
      --interval "$ORCH_CHECKPOINT_INTERVAL" --cloud "$ORCH_CLOUD_NAME" \
      --state-dir "$run_dir" --pid "$$" &
    agent=$!
  fi
fi
step "$run_dir/cmd.sh"
finish "$?" cmd
"""
