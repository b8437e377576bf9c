"""SSH key pairs (ImportKeyPair, DeleteKeyPairs)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime

from tests.sim.aliyun.models.core import SimError, invalid

# ImportKeyPair: "The imported key pair must support one of the following encryption methods:
# rsa, dsa, ssh-rsa, ssh-dss, ecdsa" (and their OpenSSH certificates), so no ssh-ed25519 or
# sk-* keys (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-importkeypair).
ACCEPTED_KEY_TYPES = frozenset(
    {
        "ssh-rsa",
        "ssh-dss",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "ssh-rsa-cert-v00@openssh.com",
        "ssh-dss-cert-v00@openssh.com",
        "ssh-rsa-cert-v01@openssh.com",
        "ssh-dss-cert-v01@openssh.com",
        "ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "ecdsa-sha2-nistp384-cert-v01@openssh.com",
        "ecdsa-sha2-nistp521-cert-v01@openssh.com",
    }
)


def key_fingerprint(public_key: str) -> str:
    """MD5 of the decoded key blob, as hex: what ImportKeyPair reports as KeyPairFingerPrint.

    A key of a type ImportKeyPair does not support is refused like a malformed one (HTTP 400,
    InvalidPublicKeyBody.Malformed, the code of ImportKeyPair's error table)."""
    parts = public_key.split()
    if len(parts) < 2 or parts[0] not in ACCEPTED_KEY_TYPES:
        raise invalid("The specified PublicKeyBody is not valid.", "InvalidPublicKeyBody.Malformed")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise invalid(
            "The specified PublicKeyBody is not valid.", "InvalidPublicKeyBody.Malformed"
        ) from None
    return hashlib.md5(blob).hexdigest()


@dataclass
class KeyPair:
    name: str
    region: str
    public_key: str
    fingerprint: str
    created_at: datetime
    resource_group_id: str
    tags: dict[str, str] = field(default_factory=dict)


class KeyPairBackend:
    """AliyunBackend's key-pair calls."""

    def import_key_pair(
        self, region: str, name: str | None, public_key: str, tags: dict
    ) -> KeyPair:
        region = self.check_region(region)
        if not name:
            raise SimError("MissingParameter", "The input parameter KeyPairName is mandatory.")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9._:-]{1,127}", name):
            raise invalid("The specified KeyPairName is not valid.", "InvalidKeyPairName.Malformed")
        fingerprint = key_fingerprint(public_key or "")
        with self.lock:
            if (region, name) in self.key_pairs:
                raise SimError(
                    "KeyPair.AlreadyExist", "The key pair with the same name already exists.", 400
                )
            pair = KeyPair(
                name=name,
                region=region,
                public_key=public_key.strip(),
                fingerprint=fingerprint,
                created_at=self.now(),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.key_pairs[(region, name)] = pair
            return pair

    def delete_key_pairs(self, region: str, names: list[str]) -> None:
        with self.lock:
            for name in names:
                # Like ECS: unknown names are skipped; instances keep the key already injected.
                self.key_pairs.pop((region, name), None)
