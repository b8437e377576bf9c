"""One pool as a handle: its name, its record store and how it reports; reads and
conditional changes of its record, each checked (pool/entries.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import EXIT_USAGE, OrchError, UsageError
from orchestrator.pool import entries as pool_entries
from orchestrator.pool import record as pool_record
from orchestrator.pool.store import NoRecord, RecordStore, open_store, update

Say = Callable[[str], None]


class NoBoxFree(OrchError):
    """`lease --wait` ran out: every box is leased and the pool is at --max."""


class NoPool(NoRecord):
    """A change found no record: an unknown pool name is bad input (exit 2), as when `read`
    finds none; still a NoRecord for those who handle a record removed meanwhile."""


@dataclass(slots=True)
class Pool:
    name: str
    store: RecordStore
    say: Say
    progress: Say | None = None
    ssh_config: str | None = None
    check_timeout: float = 900.0
    holder: str = field(default_factory=pool_record.holder_id)
    # Entries skipped as damaged, and boxes found not to be this pool's: {name: why}.
    skipped: dict[str, str] = field(default_factory=dict)
    foreign: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return pool_record.record_key(self.name)

    def read(self) -> dict[str, Any]:
        found = self.store.read(self.key)
        if found is None:
            raise UsageError(self._unknown())
        return self._checked(found.data)

    def change(self, fn: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any], Any]:
        try:
            return update(self.store, self.key, lambda data: fn(self._checked(data)))
        except NoRecord:
            raise NoPool(self._unknown(), exit_code=EXIT_USAGE) from None

    def _unknown(self) -> str:
        return f"no pool named {self.name!r} in {self.store.url}"

    def _checked(self, data: dict[str, Any]) -> dict[str, Any]:
        """The record checked (UsageError when damaged), its damaged entries removed and
        reported once each (a write then leaves them out: pool_entries)."""
        for name, why in pool_entries.check(data, self.name).items():
            if name not in self.skipped:
                self.skipped[name] = why
                self.say(f"pool {self.name}: skipping damaged entry {name}: it {why}")
        return data


def open_pool(name: str, store_url: str | None, say: Say, **kwargs: Any) -> Pool:
    """Pool `name` in its store. Its lines carry what boxes said (a failed reset's last
    stderr line, a probe's ssh error: after a lease the box is the lessee's) and what the
    shared record holds, so `say` gets them escaped (check/untrusted.py)."""
    from orchestrator.check.untrusted import printable

    pool_record.validate_pool_name(name)
    return Pool(name, open_store(store_url), lambda line: say(printable(line, None)), **kwargs)
