"""The README's Quickstart, run as written, on the real broker: from this checkout's venv,
and from txstream's wheel installed in a fresh one.

The shell blocks of the section are run in order by one bash (`set -euo pipefail`), in a
fresh folder beside a link named `.venv` (to this checkout's, or to the wheel's venv), so
`$PWD/.venv/bin` resolves as it does in a checkout. One line is left out: `txstream stack
up`, whose broker the test's own stands in for (named by TXSTREAM_KAFKA_BOOTSTRAP, with a
private TXSTREAM_HOME).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.kafka_env import KafkaEnv
from tests.support.wheel_venv import build_wheel, venv_with
from txstream.kafka.admin import TopicAdmin

ROOT = Path(__file__).parents[2]
SECTION = "## Quickstart: your own app in five minutes"


def quickstart_script() -> str:
    text = (ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    script = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    assert script.count("txstream stack up\n") == 1, "the Quickstart starts the stack once"
    return "set -euo pipefail\n" + script.replace("txstream stack up\n", "")


def run_shell(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a README script in bash: (exit status, its output); whatever it left running (a
    worker in the background, a step that failed) is killed with its process group."""
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the worker it starts joins its process group
    )
    try:
        out, _ = shell.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    return shell.returncode, out


@pytest.mark.parametrize("installed", ["checkout", "wheel"])
def test_the_readme_quickstart_runs_as_written(
    kafka: KafkaEnv, tmp_path: Path, installed: str
) -> None:
    admin = TopicAdmin(kafka.settings)
    admin.delete_topics([t for t in admin.list_topics() if t.startswith("clicks.")])
    if installed == "wheel":
        built = tmp_path / "wheel"
        built.mkdir()
        venv = built / "venv"
        venv_with(build_wheel(built), venv)
        (tmp_path / ".venv").symlink_to(venv)
    else:
        (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {
        **os.environ,
        "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "TXSTREAM_HOME": str(tmp_path / "home"),
    }
    returncode, out = run_shell(quickstart_script(), tmp_path, env)
    assert returncode == 0, out
    assert "count: clicks -> page_views" in out  # txstream describe
    app_lines = quickstart_script().split("cat > clickflow.py <<'EOF'\n", 1)[1]
    assert len(app_lines.split("\nEOF\n", 1)[0].splitlines()) <= 30, "the app fits 30 lines"
    assert ".avsc" not in quickstart_script() and "export TXSTREAM" not in quickstart_script()
    expected = (
        '{"stream": "page_views", "batch_id": 1, "tuples": [{"page": "/home", "views": 1}, '
        '{"page": "/docs", "views": 1}, {"page": "/home", "views": 2}]}'
    )
    assert expected in out.splitlines(), out
