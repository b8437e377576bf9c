#!/usr/bin/env python3
"""orch's checkpoint agent: runs ON the GPU box, next to the user's training command.

orch copies it, with the modules it imports and metadata.json (each cloud's instance metadata
service, as the clouds supply it), into one folder on the box (orchestrator/boxside/) and runs
it with the box's own `python3`: the standard library only (Python 3.8 syntax and APIs). It
imports nothing from `orchestrator`. Alibaba OSS endpoints still go through boto3, or else the
`aws` CLI.

    agent.py restore --dir DIR --store s3://BUCKET/PREFIX
    agent.py upload  --dir DIR --store s3://BUCKET/PREFIX
    agent.py watch   --dir DIR --store s3://BUCKET/PREFIX --interval SECONDS --cloud aws|aliyun
                     --state-dir STATEDIR [--pid PID] [--notice-poll SECONDS]

This file is the command line; the modules beside it do the work:

    checkpoint_store.py  the store's layout, and upload, prune and restore of a checkpoint
    watcher.py           `watch`: uploads as DIR changes, on a spot notice, and at the end
    cloud_metadata.py    each cloud's instance metadata (metadata.json), its spot notices
    store_clients.py     the S3 client: box_s3.py (built in), boto3 or the aws CLI
    box_s3.py            the standard-library S3 client (SigV4, instance-role credentials)
    agent_log.py         the agent's log lines

`watch` ends with its final upload on SIGTERM or SIGINT, or, with --pid, when PID exits or on
SIGUSR1; with --pid a SIGTERM (a stop of the job's whole process group) only says the job is
ending: what it writes on its way out is still uploaded once it has exited.

Exit status: 0 done (also "no checkpoint"), 1 a storage error or a refused checkpoint,
2 bad usage or no S3 client at all.

Environment: credentials come from the environment's AWS_ACCESS_KEY_ID, else from the box's
instance role through the instance metadata service (box_s3.py). AWS_ENDPOINT_URL /
AWS_ENDPOINT_URL_S3 / ORCH_STORE_ENDPOINT name an S3-compatible endpoint (e.g. Alibaba OSS);
ORCH_AGENT_S3_CLIENT=builtin|boto3|cli picks the client (default: builtin, boto3-or-CLI for OSS);
ORCH_AGENT_METADATA_URL replaces the instance metadata service's base URL (tests only).
"""

from __future__ import annotations

import argparse
import signal
import sys

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    from agent_log import say, warn
    from checkpoint_store import BadCheckpoint, FileChanging, Layout, restore, seq_name, upload
    from cloud_metadata import cloud_specs
    from store_clients import DEFAULT_CLOUD, NoClient, StoreError, open_store, parse_store
    from watcher import Watcher, job_stopping, request_stop
except ImportError:  # imported as orchestrator.boxside.agent (orch's own tests)
    from orchestrator.boxside.agent_log import say, warn
    from orchestrator.boxside.checkpoint_store import (
        BadCheckpoint,
        FileChanging,
        Layout,
        restore,
        seq_name,
        upload,
    )
    from orchestrator.boxside.cloud_metadata import cloud_specs
    from orchestrator.boxside.store_clients import (
        DEFAULT_CLOUD,
        NoClient,
        StoreError,
        open_store,
        parse_store,
    )
    from orchestrator.boxside.watcher import Watcher, job_stopping, request_stop


def cmd_restore(store, layout: Layout, args: argparse.Namespace) -> int:
    try:
        result = restore(store, layout, args.dir)
    except (StoreError, BadCheckpoint, OSError) as exc:
        warn(f"restore failed: {exc}")
        return 1
    if result is None:
        say(f"no checkpoint in {args.store}")
    else:
        say(f"restored {result[1]} files (checkpoint {seq_name(result[0])})")
    return 0


def cmd_upload(store, layout: Layout, args: argparse.Namespace) -> int:
    try:
        result = upload(store, layout, args.dir)
    except (StoreError, BadCheckpoint, FileChanging, OSError) as exc:
        warn(f"upload failed: {exc}")
        return 1
    if result is None:
        say(f"nothing to upload in {args.dir}")
    else:
        say(f"uploaded {len(result[1])} files (checkpoint {seq_name(result[0])})")
    return 0


def cmd_watch(store, layout: Layout, args: argparse.Namespace) -> int:
    return Watcher(store, layout, args).run()


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent.py", description="orch's checkpoint agent")
    commands = parser.add_subparsers(dest="command")
    commands.required = True
    for name, purpose in (
        ("restore", "download the latest committed checkpoint into DIR"),
        ("upload", "upload DIR now as a new checkpoint"),
        ("watch", "upload DIR as it changes and on a spot interruption notice"),
    ):
        command = commands.add_parser(name, help=purpose)
        command.add_argument("--dir", required=True)
        command.add_argument("--store", required=True, help="s3://BUCKET/PREFIX")
        # Which metadata service holds the box's credentials (and, for watch, its notices).
        command.add_argument("--cloud", choices=sorted(cloud_specs()), default=DEFAULT_CLOUD)
    watch = commands.choices["watch"]
    watch.add_argument("--interval", type=positive, required=True)
    watch.add_argument("--state-dir", required=True)
    watch.add_argument("--pid", type=int)
    watch.add_argument("--notice-poll", type=positive, default=5.0)
    return parser.parse_args(argv)


COMMANDS = {"restore": cmd_restore, "upload": cmd_upload, "watch": cmd_watch}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "watch":
        # With --pid (the wrapper's), a TERM is the job's stop reaching its whole group: the
        # final upload waits for the job's end, which the wrapper signals with SIGUSR1.
        signal.signal(signal.SIGTERM, request_stop if args.pid is None else job_stopping)
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGUSR1, request_stop)
    try:
        bucket, prefix = parse_store(args.store)
    except ValueError as exc:
        warn(str(exc))
        return 2
    try:
        store = open_store(bucket, args.cloud)
    except NoClient as exc:
        warn(str(exc))
        return 2
    except StoreError as exc:
        warn(str(exc))
        return 1
    return COMMANDS[args.command](store, Layout(prefix), args)


if __name__ == "__main__":
    sys.exit(main())
