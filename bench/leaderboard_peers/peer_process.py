"""A peer's process, stopped as every peer is stopped: SIGTERM, then SIGKILL after 30 s."""

from __future__ import annotations

import signal
import subprocess
from typing import IO


def stop(proc: subprocess.Popen[bytes], log: IO[str]) -> None:
    """Stop `proc` (by its pid) and close its log."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
