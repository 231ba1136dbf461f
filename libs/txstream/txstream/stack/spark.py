"""The native stack's Spark standalone cluster: a master and `spark_workers` workers.

They are started with the pyspark distribution's own launcher (`bin/spark-class`), the one
`start-master.sh` and `start-worker.sh` use, in the foreground so their pids are ours, bound
to 127.0.0.1. The ETL runs on the cluster when `spark_master` names it
(`TXSTREAM_SPARK_MASTER=spark://127.0.0.1:7077`); local mode stays the default.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txstream.config import Settings
from txstream.stack.process import ManagedProcess, port_free, wait_answering

HOST = "127.0.0.1"


class SparkClusterError(RuntimeError):
    """A master or worker could not be started or did not register."""


def spark_home() -> Path:
    """The pyspark distribution in this interpreter's environment (its `bin`, its jars)."""
    import pyspark

    return Path(pyspark.__file__).parent


def _launcher() -> str:
    return str(spark_home() / "bin" / "spark-class")


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(settings.log_dir),
        # Executors start the Python workers with this interpreter, which imports txstream.
        "PYSPARK_PYTHON": sys.executable,
    }


def _free(port: int, what: str) -> None:
    if not port_free(HOST, port):
        raise SparkClusterError(f"port {HOST}:{port} for {what} is in use by another process")


def master_state(settings: Settings, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The master's JSON status (workers, running and completed applications), or None."""
    url = f"http://{HOST}:{settings.spark_ui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            state: dict[str, Any] = json.load(resp)
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return state


@dataclass(frozen=True)
class SparkMaster:
    settings: Settings

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.settings.spark_master_port}"

    @property
    def ui(self) -> str:
        return f"http://{HOST}:{self.settings.spark_ui_port}"

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / "spark-master.log"

    @property
    def conf_file(self) -> Path:
        """Its properties file; its path in the command line marks the process as ours."""
        return self.settings.home / "spark" / "master.conf"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("spark-master", self.settings.run_dir, marker=str(self.conf_file))

    def start(self) -> int:
        s = self.settings
        _free(s.spark_master_port, "the Spark master")
        _free(s.spark_ui_port, "the Spark master's web UI")
        self.conf_file.parent.mkdir(parents=True, exist_ok=True)
        # Finished applications' executors' files go with the workers' directories.
        self.conf_file.write_text("spark.master.rest.enabled false\n")
        argv = [_launcher(), "org.apache.spark.deploy.master.Master",
                "--host", HOST, "--port", str(s.spark_master_port),
                "--webui-port", str(s.spark_ui_port),
                "--properties-file", str(self.conf_file)]  # fmt: skip
        pid = self.process.spawn(argv, self.log_file, env=_env(s))
        wait_answering(self.process, pid, self.answers, s.startup_timeout_s,
                       ("the Spark master", self.ui, self.log_file), SparkClusterError)  # fmt: skip
        return pid

    def answers(self, timeout_s: float = 2.0) -> bool:
        state = master_state(self.settings, timeout_s)
        return state is not None and state.get("status") == "ALIVE"


@dataclass(frozen=True)
class SparkWorker:
    settings: Settings
    index: int  # 1, 2, ...

    @property
    def name(self) -> str:
        return f"spark-worker-{self.index}"

    @property
    def ui_port(self) -> int:
        return self.settings.spark_ui_port + self.index

    @property
    def ui(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / f"{self.name}.log"

    @property
    def work_dir(self) -> Path:
        """Its executors' files and logs; its path in the command line marks it as ours."""
        return self.settings.data_dir / "spark" / self.name

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess(self.name, self.settings.run_dir, marker=str(self.work_dir))

    def start(self) -> int:
        s = self.settings
        _free(self.ui_port, f"{self.name}'s web UI")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        master = SparkMaster(s)
        argv = [_launcher(), "org.apache.spark.deploy.worker.Worker",
                "--host", HOST, "--cores", str(s.spark_worker_cores),
                "--memory", s.spark_worker_memory, "--work-dir", str(self.work_dir),
                "--webui-port", str(self.ui_port), master.url]  # fmt: skip
        pid = self.process.spawn(argv, self.log_file, env=_env(s))
        wait_answering(self.process, pid, self.answers, s.startup_timeout_s,
                       (self.name, f"{master.url} (registered)", self.log_file),
                       SparkClusterError)  # fmt: skip
        return pid

    def answers(self, timeout_s: float = 2.0) -> bool:
        """Registered with the master, and alive there."""
        state = master_state(self.settings, timeout_s)
        workers = state.get("workers", []) if state else []
        return any(
            w.get("state") == "ALIVE"
            and str(w.get("webuiaddress", "")).endswith(f":{self.ui_port}")
            for w in workers
        )
