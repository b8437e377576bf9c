"""Parse a TOML file through a cache of its parsed form, kept between runs.

Shared by the loader (shipped data files) and the price overlay, which both import it; it
imports neither of them.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any


def read_toml_cached(path: Path, cache_name: str) -> dict[str, Any]:
    """Parse a TOML file, through a pickle cache kept under `cache_name` (see _parse_cache).

    Raises FileNotFoundError, or ValueError (tomllib.TOMLDecodeError) for a malformed file.
    """
    stat = path.stat()
    cached = _parse_cache(cache_name, stat.st_mtime_ns, stat.st_size)
    try:
        data = pickle.loads(cached.read_bytes())
        if isinstance(data, dict):
            return data
    except (OSError, pickle.UnpicklingError, EOFError, ValueError):
        pass
    import tomllib  # only on a cache miss: the parser costs more start-up than the rest

    with path.open("rb") as handle:
        data = tomllib.load(handle)
    _write_quietly(cached, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    return data


def _parse_cache(filename: str, mtime_ns: int, size: int) -> Path:
    """Where the parsed form of a data file is kept between runs.

    Parsing the TOML files costs more than the rest of `orch plan`; a pickle of the parsed
    tables, keyed by the file's mtime and size, loads about ten times faster.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orch" / "catalog" / f"{filename}.{mtime_ns}.{size}.pickle"


def _write_quietly(target: Path, payload: bytes) -> None:
    """Best effort: a read-only or missing cache directory just means parsing next time."""
    import tempfile  # pulls in shutil, random, bz2 and lzma: only when writing

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(target.name.split(".", 2)[0] + ".*.pickle"):
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, target)
    except OSError:
        pass
