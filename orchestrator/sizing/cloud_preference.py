"""Which clouds and regions `orch plan` ranks first: those this machine can launch in.

With credentials for some clouds (read offline through each Cloud's `local_setup`), their
candidates rank before those of clouds without credentials, and, unless --region is given,
a cloud's configured default region ranks before its other regions; cost orders each tier.
With no credentials anywhere (the offline demo), every candidate is ranked by cost alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.clouds import get
from orchestrator.clouds.base import LocalSetup
from orchestrator.plan import Candidate

# Tiers: 0 usable cloud in its configured region (or no region preference), 1 usable cloud
# elsewhere, 2 a cloud without credentials.
PREFERRED, OTHER_REGION, NO_CREDENTIALS = 0, 1, 2


@dataclass(frozen=True, slots=True)
class CloudPreference:
    """What this machine has set up per cloud, and whether the user chose a region."""

    setups: dict[str, LocalSetup]
    region_given: bool  # --region: the user chose the region, no region preference applies

    @property
    def any_usable(self) -> bool:
        return any(s.usable for s in self.setups.values())

    def tier(self, candidate: Candidate) -> int:
        if not self.any_usable:
            return PREFERRED
        setup = self.setups.get(candidate.cloud)
        if setup is None or not setup.usable:
            return NO_CREDENTIALS
        if self.region_given or not setup.region or candidate.region == setup.region:
            return PREFERRED
        return OTHER_REGION

    def describe(self) -> str:
        """One line for the plan table: which clouds were considered, and how ranked."""
        if not self.any_usable:
            return (
                f"clouds: {', '.join(self.setups)} (no credentials found for any:"
                " all ranked by cost alone)"
            )
        parts = []
        for name, setup in self.setups.items():
            if not setup.usable:
                parts.append(f"{name} (no credentials found: ranked after)")
                continue
            text = f"{name} (credentials: {setup.basis}"
            if setup.region and not self.region_given:
                text += f"; {setup.region} from {setup.region_basis} ranked first"
            parts.append(text + ")")
        return "clouds: " + ", ".join(parts)

    def to_list(self) -> list[dict[str, Any]]:
        return [
            {
                "cloud": name,
                "credentials": setup.usable,
                "credentials_from": setup.basis or None,
                "region": setup.region,
                "region_from": setup.region_basis or None,
            }
            for name, setup in self.setups.items()
        ]


def cloud_preference(clouds: Iterable[str], region_given: bool) -> CloudPreference:
    return CloudPreference({name: get(name).local_setup() for name in clouds}, region_given)
