"""What /proc says about a process id: shared by the stack and service discovery."""

from __future__ import annotations

from pathlib import Path


def is_alive(pid: int) -> bool:
    """True for a running process; a zombie (killed, not yet reaped) counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""
