"""The native stack's Prometheus: Debian's `prometheus` binary, scraping every local service.

Services register themselves (txstream.observability.targets), so the scrape config is one
file-discovery job over the targets directory, and nothing is edited when a worker starts on
a new port. The data stays under the stack's home, like the broker's.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from txstream.config import Settings
from txstream.observability.alerts import RULES
from txstream.observability.targets import live_targets, targets_dir
from txstream.stack.process import ManagedProcess, port_free, wait_answering

CONFIG = """\
# Written by `txstream stack up`; edits are overwritten. Every txstream service registers
# its /metrics address as a file in {targets} (job label: worker, sequencer, coordinator, etl).
global:
  scrape_interval: {interval}
  evaluation_interval: {interval}

rule_files:
  - "{rules}"

scrape_configs:
  - job_name: txstream
    file_sd_configs:
      - files: ["{targets}/*.json"]
        refresh_interval: {interval}
"""


class PrometheusError(RuntimeError):
    """Prometheus could not be started or did not become ready."""


@dataclass(frozen=True)
class PrometheusServer:
    settings: Settings

    @property
    def conf_dir(self) -> Path:
        return self.settings.home / "prometheus"

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir / "prometheus"

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://{self.settings.prometheus_host}:{self.settings.prometheus_port}"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("prometheus", self.settings.run_dir, marker=str(self.conf_dir))

    def start(self) -> int:
        binary = self._binary()
        self._check_port_free()
        config = self._write_config()
        live_targets(self.settings)  # drop registrations that SIGKILLed services left
        s = self.settings
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={s.prometheus_retention}",
            f"--web.listen-address={s.prometheus_host}:{s.prometheus_port}",
        ]
        pid = self.process.spawn(argv, self.log_file)
        self.wait_ready(pid)
        return pid

    def answers(self, timeout_s: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=timeout_s) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, pid: int) -> None:
        wait_answering(self.process, pid, lambda: self.answers(timeout_s=1.0),
                       self.settings.startup_timeout_s, ("prometheus", self.url, self.log_file),
                       PrometheusError)  # fmt: skip

    def _binary(self) -> str:
        found = shutil.which(self.settings.prometheus_bin)
        if found is None:
            raise PrometheusError(
                f"no prometheus binary '{self.settings.prometheus_bin}' on PATH; run `make setup` "
                "(Debian package prometheus) or set TXSTREAM_PROMETHEUS_BIN"
            )
        return found

    def _check_port_free(self) -> None:
        s = self.settings
        if not port_free(s.prometheus_host, s.prometheus_port):
            raise PrometheusError(
                f"port {s.prometheus_host}:{s.prometheus_port} is in use by another process; "
                "set TXSTREAM_PROMETHEUS_PORT"
            )

    def _write_config(self) -> Path:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        targets_dir(self.settings).mkdir(parents=True, exist_ok=True)
        path = self.conf_dir / "prometheus.yml"
        interval = f"{round(self.settings.prometheus_scrape_interval_s * 1000)}ms"
        path.write_text(
            CONFIG.format(targets=targets_dir(self.settings), interval=interval, rules=RULES)
        )
        return path
