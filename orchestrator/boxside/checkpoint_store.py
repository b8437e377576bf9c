"""Checkpoints in the store, for orch's checkpoint agent: their layout, their manifests, and
how a directory is uploaded as one, committed, pruned and restored.

Store layout (one writer per store; a reader never sees a half-written checkpoint):

    PREFIX/checkpoints/00000007/<relative path>   the files of checkpoint 7, uploaded first
    PREFIX/checkpoints/00000007.manifest.json     {"seq", "files": {relpath: size},
                                                   "mtime_ns": {relpath: ns},
                                                   "sha256": {relpath: hex}, "created"}
    PREFIX/checkpoints/LATEST                     "00000007", written last: the commit

Restore reads LATEST, then that manifest, and validates all of it (paths, sizes, times,
digests) before it writes anything; then it downloads exactly the files listed, each to a
temporary name, checks each one's size and SHA-256, and only when all match renames them into
place: a damaged or tampered checkpoint is refused whole. After each commit the newest KEEP
committed checkpoints stay and older ones (and abandoned half-uploads) go.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8. `store` is
any of store_clients' clients.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    import box_s3
    from agent_log import utc_now, warn
except ImportError:  # imported as orchestrator.boxside.checkpoint_store (orch's own tests)
    from orchestrator.boxside import box_s3
    from orchestrator.boxside.agent_log import utc_now, warn

SEQ_WIDTH = 8
KEEP = 2
# Tries per file when it keeps changing while it is uploaded (the trainer is writing it).
CHANGE_TRIES = 3
TMP_PREFIX = ".orch-agent-tmp-"
# Largest size or time a manifest may state: os.utime and file sizes are 64-bit.
MAX_INT64 = 2**63 - 1
HASH_CHUNK = 1 << 20

StoreError = box_s3.StoreError  # an object storage request failed


class BadCheckpoint(Exception):
    """The store holds a malformed or unsafe pointer or manifest."""


class FileChanging(Exception):
    """A file kept changing while it was being uploaded."""


def is_seq(text: str) -> bool:
    return text.isdigit() and text.isascii()


def seq_name(seq: int) -> str:
    return str(seq).zfill(SEQ_WIDTH)


class Layout:
    """Where a checkpoint's pieces live under PREFIX/checkpoints/."""

    def __init__(self, prefix: str) -> None:
        self.root = (prefix + "/" if prefix else "") + "checkpoints/"

    def latest(self) -> str:
        return self.root + "LATEST"

    def manifest(self, seq: int) -> str:
        return self.root + seq_name(seq) + ".manifest.json"

    def files(self, seq: int) -> str:
        return self.root + seq_name(seq) + "/"

    def file(self, seq: int, rel: str) -> str:
        return self.files(seq) + rel


MANIFEST_SUFFIX = ".manifest.json"


def scan_store(store, layout: Layout) -> tuple[set[int], dict[int, list[str]]]:
    """(committed seqs: those with a manifest, {seq: the keys of its files}), in one listing."""
    committed, files = set(), {}
    for key in store.list(layout.root):
        name = key[len(layout.root) :]
        head, slash, _ = name.partition("/")
        if slash and is_seq(head):
            files.setdefault(int(head), []).append(key)
        elif name.endswith(MANIFEST_SUFFIX) and is_seq(name[: -len(MANIFEST_SUFFIX)]):
            committed.add(int(name[: -len(MANIFEST_SUFFIX)]))
    return committed, files


def read_latest(store, layout: Layout) -> int | None:
    raw = store.get_bytes(layout.latest())
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace").strip()
    if not is_seq(text):
        raise BadCheckpoint(f"LATEST holds {text[:40]!r}, not a checkpoint number")
    return int(text)


def check_relpath(rel: object) -> str:
    """A manifest's relative path, refused unless it stays inside the directory."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        raise BadCheckpoint(f"unsafe path in manifest: {rel!r}")
    if rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
        raise BadCheckpoint(f"unsafe path in manifest: {rel!r}")
    return rel


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT64


def is_digest(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_manifest(raw: bytes, seq: int) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """({relpath: size}, {relpath: mtime_ns}, {relpath: sha256}) of a manifest, every field
    validated: a bad one refuses the whole checkpoint, before anything is written."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} is not JSON") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} has no files")
    if manifest.get("seq", seq) != seq:
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} names another seq")
    name = seq_name(seq)
    files = {}
    for rel, size in manifest["files"].items():
        if not is_count(size):
            raise BadCheckpoint(f"bad size for {rel!r} in checkpoint {name}")
        files[check_relpath(rel)] = size
    mtimes = manifest.get("mtime_ns", {})
    digests = manifest.get("sha256")
    if not isinstance(mtimes, dict) or not isinstance(digests, dict):
        raise BadCheckpoint(f"manifest of checkpoint {name} has no SHA-256 digests")
    for rel, ns in mtimes.items():
        if rel not in files or not is_count(ns):
            raise BadCheckpoint(f"bad mtime_ns for {str(rel)[:80]!r} in checkpoint {name}")
    if set(digests) != set(files) or not all(is_digest(d) for d in digests.values()):
        raise BadCheckpoint(f"manifest of checkpoint {name}: a file lacks a valid SHA-256")
    return files, mtimes, digests


# ------------------------------------------------------------------------------ upload


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def scan_dir(root: str) -> dict[str, tuple[int, int]]:
    """The regular files under root: {relpath: (size, mtime_ns)}.

    Symlinked directories are not entered, symlinked files count only when their target is
    inside root, and files that vanish while we look are left out.
    """
    found = {}
    if not os.path.isdir(root):
        return found
    real_root = os.path.realpath(root)
    for dirpath, _dirnames, filenames in os.walk(root):  # followlinks=False
        for name in filenames:
            if name.startswith(TMP_PREFIX):
                continue
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path) and not inside(os.path.realpath(path), real_root):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                found[rel] = (info.st_size, info.st_mtime_ns)
    return found


def upload_one(store, path: str, key: str) -> tuple[int, int, str] | None:
    """Upload one file; its (size, mtime_ns, sha256) as uploaded, or None when it vanished."""
    for _ in range(CHANGE_TRIES):
        try:
            before = os.stat(path)
            digest = file_digest(path)
            store.upload(path, key)
            after = os.stat(path)
        except FileNotFoundError:
            return None
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
            return after.st_size, after.st_mtime_ns, digest
    raise FileChanging(f"{path} kept changing while it was uploaded")


def upload(store, layout: Layout, root: str, snapshot=None):  # noqa: ANN201 - (seq, files)
    """Upload root as a new checkpoint and commit it.

    Returns (seq, {relpath: (size, mtime_ns)} as uploaded), or None when there was nothing.
    """
    snapshot = scan_dir(root) if snapshot is None else snapshot
    if not snapshot:
        return None
    committed, files = scan_store(store, layout)
    seq = max(committed | set(files) | {0}) + 1
    uploaded = {}
    for rel in sorted(snapshot):
        got = upload_one(store, os.path.join(root, *rel.split("/")), layout.file(seq, rel))
        if got is not None:
            uploaded[rel] = got
    if not uploaded:
        return None
    manifest = {
        "seq": seq,
        "files": {rel: got[0] for rel, got in uploaded.items()},
        "mtime_ns": {rel: got[1] for rel, got in uploaded.items()},
        "sha256": {rel: got[2] for rel, got in uploaded.items()},
        "created": utc_now(),
    }
    store.put_bytes(layout.manifest(seq), json.dumps(manifest, sort_keys=True).encode())
    store.put_bytes(layout.latest(), seq_name(seq).encode())  # the commit
    try:
        prune(store, layout, seq, committed | {seq}, files)
    except StoreError as exc:  # committed all the same; the next prune tries again
        warn(f"could not delete old checkpoints: {exc}")
    return seq, {rel: got[:2] for rel, got in uploaded.items()}


def prune(store, layout: Layout, seq: int, committed: set[int], files: dict[int, list[str]]):
    """Keep the newest KEEP committed checkpoints up to seq; delete older ones and leftovers.

    `files` is the listing taken before seq was uploaded: complete for every older seq.
    """
    keep = set(sorted(s for s in committed if s <= seq)[-KEEP:])
    for old in sorted(committed | set(files)):
        if old in keep or old >= seq:
            continue
        if old in committed:  # the manifest first: no manifest ever lists deleted files
            store.delete(layout.manifest(old))
        for key in files.get(old, []):
            store.delete(key)


# ------------------------------------------------------------------------------ restore


def fetch_file(store, key: str, root: str, real_root: str, rel: str, want: tuple) -> str:
    """Download one file next to root/rel under a temporary name and check its (size,
    sha256); returns the temporary path. Refuses to leave root."""
    target = os.path.join(root, *rel.split("/"))
    parent = os.path.dirname(target)
    # A symlink already in DIR: checked before makedirs, which would follow it and create
    # the missing folders outside DIR (realpath resolves the part of parent that exists).
    if not inside(os.path.realpath(parent), real_root):
        raise BadCheckpoint(f"refusing to write {rel!r}: it leads outside {root}")
    os.makedirs(parent, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=parent)
    os.close(handle)
    try:
        store.download(key, tmp)
        size, digest = os.path.getsize(tmp), file_digest(tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    if size != want[0] or digest != want[1]:
        os.unlink(tmp)
        what = f"{size} bytes" if size != want[0] else f"SHA-256 {digest[:12]}..."
        raise BadCheckpoint(f"{rel}: {what} does not match the manifest; checkpoint refused")
    return tmp


def restore(store, layout: Layout, root: str) -> tuple[int, int] | None:
    """Download the latest committed checkpoint into root: (seq, files), or None if none.

    Every file is downloaded and verified before any is renamed into place."""
    os.makedirs(root, exist_ok=True)
    seq = read_latest(store, layout)
    if seq is None:
        return None
    raw = store.get_bytes(layout.manifest(seq))
    if raw is None:
        raise BadCheckpoint(f"LATEST names checkpoint {seq_name(seq)}, which has no manifest")
    files, mtimes, digests = parse_manifest(raw, seq)
    real_root = os.path.realpath(root)
    fetched = {}
    try:
        for rel in sorted(files):
            want = (files[rel], digests[rel])
            fetched[rel] = fetch_file(store, layout.file(seq, rel), root, real_root, rel, want)
    except BaseException:
        for tmp in fetched.values():
            os.unlink(tmp)
        raise
    for rel, tmp in fetched.items():
        if rel in mtimes:  # so `watch` sees the restored files as already uploaded
            os.utime(tmp, ns=(mtimes[rel], mtimes[rel]))
        os.replace(tmp, os.path.join(root, *rel.split("/")))
    return seq, len(files)


def store_signature(store, layout: Layout) -> dict[str, tuple[int, int]] | None:
    """The latest committed checkpoint as scan_dir would see it once restored, if known."""
    try:
        seq = read_latest(store, layout)
        raw = None if seq is None else store.get_bytes(layout.manifest(seq))
        if seq is None or raw is None:
            return None
        files, mtimes, _ = parse_manifest(raw, seq)
    except (StoreError, BadCheckpoint):
        return None
    if set(mtimes) != set(files):
        return None
    return {rel: (files[rel], mtimes[rel]) for rel in files}
