"""A JSON request to an HTTP endpoint, as its clients send one."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any


def http(
    url: str, body: bytes | None = None, json_body: bool = True, token: str | None = None
) -> tuple[int, Any]:
    """(status, decoded JSON answer): a POST of `body` if given, else a GET; `json_body`
    sends it as Content-Type: application/json, `token` as a bearer token."""
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if json_body:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_listening(port: int, timeout_s: float = 60.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:`port` (a server starting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing listens on port {port} after {timeout_s:.0f} s") from e
            time.sleep(0.1)
