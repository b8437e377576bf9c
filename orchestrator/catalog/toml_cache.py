"""Parse a TOML file through a data-only cache in the user's cache directory.

Parsing the catalog's TOML files costs more than the rest of `orch plan`, so the parsed tables
are kept between runs, keyed by the file's name, place, mtime and size. The place (a checksum
of its absolute path) keeps the entries of two installs apart: an ML engineer's two venvs, or
two checkouts, would otherwise replace each other's entries on every run and parse each time.
The cache holds JSON, not a pickle: a cache directory restored from CI or shared between users
is data, and loading it can never run code. TOML's date and time values are stored (and
returned on a miss too) as ISO strings, so a hit and a miss give the same result.

Both the loader (shipped data files) and the price overlay read through here; this module
imports nothing from the catalog.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import zlib
from pathlib import Path
from typing import Any

SUFFIX = ".json"
_OLD_SUFFIXES = (".pickle",)  # earlier releases' format: deleted, never loaded


def read_toml_cached(path: Path, cache_name: str) -> dict[str, Any]:
    """Parse a TOML file, through the cache kept under `cache_name` (see `cache_path`).

    Raises FileNotFoundError (or another OSError), or ValueError (tomllib.TOMLDecodeError)
    for a malformed file. An unreadable or corrupt cache entry only means parsing again.
    """
    stat = path.stat()
    cached = cache_path(cache_name, path, stat.st_mtime_ns, stat.st_size)
    try:
        data = json.loads(cached.read_bytes())
        if isinstance(data, dict):
            return data
    except (OSError, ValueError):  # missing, unreadable, or not JSON (UnicodeDecodeError too)
        pass
    import tomllib  # only on a cache miss: the parser costs more start-up than the rest

    with path.open("rb") as handle:
        parsed = tomllib.load(handle)
    payload = json.dumps(parsed, default=_iso, separators=(",", ":"))
    write_quietly(cached, payload.encode(), cache_name, place_tag(path))
    return json.loads(payload)


def _iso(value: object) -> str:
    """TOML's offset/local date-times, dates and times, as ISO 8601 strings."""
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    raise TypeError(f"cannot cache a {type(value).__name__} from TOML")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/orch/catalog/ (XDG_CACHE_HOME defaults to ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orch" / "catalog"


def place_tag(path: Path | str) -> str:
    """A short tag of where a file (or an install) is: "p" and the CRC-32 of its absolute path
    (the letter keeps it apart from the digits and hex keys of older releases' entry names)."""
    return f"p{zlib.crc32(os.fsencode(os.path.abspath(path))):08x}"


def cache_path(filename: str, source: Path, mtime_ns: int, size: int) -> Path:
    """Where the parsed form of `source`, named `filename`, is kept (in `cache_dir()`)."""
    return cache_dir() / f"{filename}.{place_tag(source)}.{mtime_ns}.{size}{SUFFIX}"


# Places (installs) whose entries a name keeps: each checkout or venv a user deletes would
# otherwise leave its entries behind for good.
MAX_PLACES = 8


def write_quietly(target: Path, payload: bytes, name: str, place: str) -> None:
    """Write `target`, the entry `name` of `place`, and delete the entries it replaces: the
    place's older ones, those of earlier releases (no place tag: a digit or hex key follows
    the name; or pickles, deleted, never loaded), and the least recently written places'
    beyond MAX_PLACES. Best effort: a read-only or missing cache directory just means parsing
    next time."""
    import tempfile  # pulls in shutil, random, bz2 and lzma: only when writing

    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        stale = [
            *folder.glob(f"{name}.{place}.*{SUFFIX}"),
            *folder.glob(f"{name}.[0-9a-f]*{SUFFIX}"),
            *(entry for old in _OLD_SUFFIXES for entry in folder.glob(f"{name}.*{old}")),
        ]
        others = sorted(
            set(folder.glob(f"{name}.p*{SUFFIX}")) - set(stale) - {target},
            key=lambda entry: entry.stat().st_mtime_ns,
            reverse=True,
        )
        for entry in [*stale, *others[MAX_PLACES - 1 :]]:
            if entry != target:
                entry.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, target)
    except OSError:
        pass
