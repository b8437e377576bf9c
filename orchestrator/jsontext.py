"""JSON read from places others can write (a state bucket, a bundle, a box directory).

`json.loads` raises RecursionError, which is not a ValueError, for nesting deeper than the
interpreter's recursion limit: `"[" * 100_000` in a bucket object made every reader that caught
ValueError (or JSONDecodeError) a traceback. `loads` raises such text as a JSONDecodeError, as
for any other text that is not JSON, so each caller's one-line refusal covers it.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`; JSONDecodeError (a ValueError) also for JSON nested too deeply."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("JSON nested deeper than orch reads", "", 0) from None
