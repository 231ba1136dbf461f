"""What CPUs a process's threads may run on, as /proc shows them."""

from __future__ import annotations

from pathlib import Path


def thread_cpu_lists(pid: int) -> dict[int, str]:
    """Each live thread's `Cpus_allowed_list` ("0", "0-1"), by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[int(task.name)] = line.split(":", 1)[1].strip()
    return out
