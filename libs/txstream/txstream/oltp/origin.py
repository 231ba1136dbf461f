"""Proof of origin for the OLTP records only the services write.

The coordinator's requests, decisions and log, and the engines' replies, travel on topics
that any client can write on a cluster without ACLs. Each such record ends in a tag, an
HMAC-SHA256 (cut to 16 bytes) of everything before it under the stack's internal key, and a
reader drops a record whose tag does not match: a client without the key can write those
topics but decide, vote or request nothing. The key is `Settings.internal_key`, else
`<secrets dir>/internal.key`, which the first service to need it creates (32 random bytes,
hex, mode 0600); processes of one stack share that directory, clients never read it.
Threat model: docs/reliability.md.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from pathlib import Path

from txstream.config import Settings

TAG_BYTES = 16
KEY_FILE = "internal.key"


class Unauthenticated(ValueError):
    """A record that must carry the stack's tag and does not (`Origin.strip`)."""


class Origin:
    """Tags records with the stack's internal key, and checks and strips the tags."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError(f"an internal key of {len(key)} bytes: it needs 16 or more")
        self._key = key

    @classmethod
    def of(cls, settings: Settings, create: bool = True) -> Origin:
        """The stack's key: given (`internal_key`, hex), else read from its file, created
        there at first use unless `create` is off (a reader of a stack's records, which
        with a key of its own would take every record for a forgery)."""
        if settings.internal_key is not None:
            text = settings.internal_key.get_secret_value()
            where = "TXSTREAM_INTERNAL_KEY"
        else:
            path = settings.secrets_dir / KEY_FILE
            if not create and not path.exists():
                raise ValueError(
                    f"no internal key at {path}: the stack's services made theirs elsewhere; "
                    "set TXSTREAM_HOME (or TXSTREAM_KAFKA_SECRETS_DIR) as theirs, or "
                    "TXSTREAM_INTERNAL_KEY"
                )
            text, where = _read_or_create(path), str(path)
        try:
            return cls(bytes.fromhex(text.strip()))
        except ValueError as e:
            raise ValueError(f"the internal key in {where} is not hex of 16+ bytes: {e}") from None

    def tag(self, data: bytes) -> bytes:
        return hmac.digest(self._key, data, "sha256")[:TAG_BYTES]

    def sign(self, data: bytes) -> bytes:
        return data + self.tag(data)

    def strip(self, data: bytes, what: str) -> bytes:
        """`data` without its tag; `Unauthenticated` naming `what` if the tag is wrong."""
        body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
        if len(data) <= TAG_BYTES or not hmac.compare_digest(tag, self.tag(body)):
            raise Unauthenticated(
                f"a {what} without the stack's proof of origin: only the coordinator and "
                "the engines, which hold the internal key, write these records"
            )
        return body


def _read_or_create(path: Path) -> str:
    """The key file's text; a new key if there is none. Written whole under another name
    and linked into place, so a concurrent reader never sees a part, and of two processes
    creating it at once, both end with the one linked first."""
    try:
        return path.read_text()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    staged = Path(name)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        os.link(staged, path)
    except FileExistsError:
        pass
    finally:
        staged.unlink()
    return path.read_text()
