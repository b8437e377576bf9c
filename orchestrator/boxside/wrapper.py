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
# The wrapper's own variables start with _orch_, a prefix no --env name may have (run/spec.py):
# the env file is sourced here, and a job's `run_dir` or `child` must change neither side.
_orch_dir=$1
if [ -n "${ORCH_PATH:-}" ]; then export PATH="$ORCH_PATH"; fi
unset ORCH_PATH
# The job's environment values: read, then deleted before the pid tells orch the job runs.
if [ -f "$_orch_dir/env" ]; then . "$_orch_dir/env"; rm -f "$_orch_dir/env"; fi
echo "$$" > "$_orch_dir/pid.tmp" && mv -f "$_orch_dir/pid.tmp" "$_orch_dir/pid"
_orch_child=""
_orch_agent=""
finish() {
  rm -f "$_orch_dir/env"
  if [ -n "$_orch_agent" ]; then
    # USR1: the job has exited, upload once more and end. (A stop's TERM reached the agent with
    # the group; it waits for this, so what the job wrote on that TERM goes up too.)
    kill -USR1 "$_orch_agent" 2>/dev/null
    wait "$_orch_agent"
    # A trapped signal ends `wait` early (status > 128): wait for the agent's own status.
    _orch_agent_rc=$?
    while kill -0 "$_orch_agent" 2>/dev/null; do wait "$_orch_agent"; _orch_agent_rc=$?; done
    echo "$_orch_agent_rc" > "$_orch_dir/agent.exit"
  fi
  # Into the space prepare reserved (exit.reserve: newlines), in place: a full disk cannot
  # refuse it. Without the reserve (an older prepare), a new file as before.
  if [ -f "$_orch_dir/exit.reserve" ] \
    && printf '%s %s\n' "$1" "$2" 1<> "$_orch_dir/exit.reserve" \
    && mv -f "$_orch_dir/exit.reserve" "$_orch_dir/exit"; then :
  else
    printf '%s %s\n' "$1" "$2" > "$_orch_dir/exit.tmp" \
      && mv -f "$_orch_dir/exit.tmp" "$_orch_dir/exit"
  fi
  exit 0
}
# `orch stop` signals the whole process group (systemd: every process of the unit), so the
# step already has its TERM: the wrapper only survives it, to keep the step's status. Passing
# it on as well would hand the step a second TERM while its handler runs.
trap ':' TERM INT HUP
step() {
  bash "$1" </dev/null &
  _orch_child=$!
  wait "$_orch_child"
  _orch_rc=$?
  # A trapped signal ends `wait` early (status > 128): wait again for the step's own status.
  while kill -0 "$_orch_child" 2>/dev/null; do wait "$_orch_child"; _orch_rc=$?; done
  _orch_child=""
  return "$_orch_rc"
}
cd "$ORCH_WORKDIR" || finish 126 workdir
if [ -f "$_orch_dir/setup.sh" ]; then
  step "$_orch_dir/setup.sh"
  _orch_rc=$?
  if [ "$_orch_rc" -ne 0 ]; then finish "$_orch_rc" setup; fi
fi
export ORCH_RESUMED=0
if [ -n "${ORCH_STORE:-}" ]; then
  mkdir -p "$ORCH_CHECKPOINT_DIR"
  _orch_restored=$(python3 "$_orch_dir/agent.py" restore --dir "$ORCH_CHECKPOINT_DIR" \
    --store "$ORCH_STORE" --cloud "$ORCH_CLOUD_NAME") || finish 1 restore
  echo "$_orch_restored"
  case "$_orch_restored" in *"orch-agent: restored"*) ORCH_RESUMED=1 ;; esac
  # A cluster's nodes all restore; rank 0 alone uploads (ORCH_CHECKPOINT_UPLOAD=0 elsewhere).
  if [ "${ORCH_CHECKPOINT_UPLOAD:-1}" = 1 ]; then
    python3 "$_orch_dir/agent.py" watch --dir "$ORCH_CHECKPOINT_DIR" --store "$ORCH_STORE" \
      --interval "$ORCH_CHECKPOINT_INTERVAL" --cloud "$ORCH_CLOUD_NAME" \
      --state-dir "$_orch_dir" --pid "$$" &
    _orch_agent=$!
  fi
fi
step "$_orch_dir/cmd.sh"
finish "$?" cmd
"""
