"""Keep one long-running service alive: restart it when it dies, stop it when asked.

A worker SIGKILLed mid-run must come back with nobody calling `stack up`, and a kill -9 test
must hit the process that does the work, not a wrapper. So the supervisor is a process of its
own, and `<home>/run/NAME.pid` names the real child (the supervisor's own pid is in
`NAME.supervisor`, so that a glob for `worker*.pid` finds only workers). The child writes
that file itself between fork and exec, so it is current before the new child runs a single
instruction of its own.

The supervisor blocks SIGCHLD, SIGTERM and SIGINT and takes them with `sigtimedwait`: a child
exit or a stop request is a return value, never a handler racing the restart logic.

Orphans: the child asks the kernel (prctl PR_SET_PDEATHSIG, Linux only) for SIGTERM when the
supervisor dies, so a SIGKILLed supervisor takes its child down with it. The request is tied to
the thread that forked, which is why the supervisor stays single-threaded (that also keeps
`preexec_fn` safe). A child that ignores SIGTERM outlives a SIGKILLed supervisor; `stop()`
ends it by pid.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
    wait_fixed,
)

from txstream.config import Settings
from txstream.stack.process import ManagedProcess

PR_SET_PDEATHSIG = 1
_WAKE = frozenset({signal.SIGCHLD, signal.SIGTERM, signal.SIGINT})
_STOP = frozenset({signal.SIGTERM, signal.SIGINT})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_prctl = ctypes.CDLL(None, use_errno=True).prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl.restype = ctypes.c_int


class SupervisorError(RuntimeError):
    """A supervised service could not be started or did not come up."""


@dataclass(frozen=True)
class Policy:
    """When to restart, and how patiently to stop."""

    max_restarts: int = 10
    window_s: float = 60.0
    backoff_ms: int = 200
    backoff_max_ms: int = 5000
    stop_timeout_s: float = 10.0

    def cli_args(self) -> list[str]:
        return [
            f"--max-restarts={self.max_restarts}",
            f"--window-s={self.window_s}",
            f"--backoff-ms={self.backoff_ms}",
            f"--backoff-max-ms={self.backoff_max_ms}",
            f"--stop-timeout-s={self.stop_timeout_s}",
        ]


@dataclass(frozen=True)
class ServiceFiles:
    """Where one supervised service keeps its state; all but the logs vanish on a clean stop."""

    settings: Settings
    name: str

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"service name {self.name!r} must match {_NAME.pattern}")

    @property
    def child_pidfile(self) -> Path:
        return self.settings.run_dir / f"{self.name}.pid"

    @property
    def supervisor_pidfile(self) -> Path:
        return self.settings.run_dir / f"{self.name}.supervisor"

    @property
    def restarts(self) -> Path:
        return self.settings.run_dir / f"{self.name}.restarts"

    @property
    def child_log(self) -> Path:
        return self.settings.log_dir / f"{self.name}.log"

    @property
    def supervisor_log(self) -> Path:
        return self.settings.log_dir / f"{self.name}.supervisor.log"

    def run_files(self) -> tuple[Path, ...]:
        return (self.child_pidfile, self.supervisor_pidfile, self.restarts)


def _identity(settings: Settings, name: str) -> list[str]:
    """The supervisor's first arguments; joined, they are its marker against pid reuse."""
    return ["--home", str(settings.home), "--name", name]


def describe(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


class Stopping(Exception):
    """SIGTERM or SIGINT reached the supervisor."""

    def __init__(self, signo: int) -> None:
        super().__init__(f"received {signal.Signals(signo).name}")


class ChildFailed(Exception):
    """The child died of something other than a clean exit or our own stop."""

    def __init__(self, pid: int, returncode: int) -> None:
        super().__init__(f"child pid {pid} {describe(returncode)}")


class RestartBudget:
    """Tenacity stop condition: more than `limit` failures within `window_s` is a crash loop."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self.failures: deque[float] = deque()

    def __call__(self, _state: RetryCallState) -> bool:
        now = time.monotonic()
        self.failures.append(now)
        while now - self.failures[0] > self.window_s:
            self.failures.popleft()
        return len(self.failures) > self.limit


class Supervisor:
    """The loop inside `txstream supervise`."""

    def __init__(self, name: str, argv: Sequence[str], settings: Settings, policy: Policy) -> None:
        self.files = ServiceFiles(settings, name)
        self.argv = list(argv)
        self.policy = policy
        self.env = {**os.environ, "TXSTREAM_HOME": str(settings.home)}
        self.log = _event_log(self.files)
        self._child: subprocess.Popen[bytes] | None = None
        self._mask: Iterable[int] = ()

    def run(self) -> int:
        """Supervise until a clean child exit (0), a stop request (0) or a crash loop (1)."""
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE)
        self.files.settings.run_dir.mkdir(parents=True, exist_ok=True)
        _write_int(self.files.supervisor_pidfile, os.getpid())
        _write_int(self.files.restarts, 0)
        try:
            self._retrying()(self._run_child)
        except Stopping as stop:
            self._stop_child(stop)
            return 0
        except ChildFailed as failed:
            p = self.policy
            self.log.error(
                f"giving up: {failed}, failure {p.max_restarts + 1} within {p.window_s:g} s "
                f"exceeds --max-restarts={p.max_restarts}"
            )
            return 1
        except (OSError, subprocess.SubprocessError) as e:
            self.log.error(f"cannot start {self.argv}: {e}")
            return 1
        finally:
            for path in self.files.run_files():
                path.unlink(missing_ok=True)
        self.log.info("child exited with status 0; supervisor done")
        return 0

    def _retrying(self) -> Retrying:
        p = self.policy
        return Retrying(
            retry=retry_if_exception_type(ChildFailed),
            stop=RestartBudget(p.max_restarts, p.window_s),
            wait=wait_exponential(multiplier=p.backoff_ms / 1000, max=p.backoff_max_ms / 1000),
            sleep=self._backoff,
            before_sleep=self._note_restart,
            reraise=True,
        )

    def _run_child(self) -> None:
        first = self._child is None
        with self.files.child_log.open("ab") as out:
            self._child = child = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                process_group=0,  # Ctrl-C reaches the supervisor only; it decides how to stop
                preexec_fn=partial(_in_child, os.getpid(), self._mask, self.files.child_pidfile),
            )
        if first:
            self.log.info(f"started child pid {child.pid}: {self.argv}")
        while child.poll() is None:
            signo = signal.sigwaitinfo(_WAKE).si_signo
            if signo != signal.SIGCHLD:
                raise Stopping(signo)
        if child.returncode != 0:
            raise ChildFailed(child.pid, child.returncode)

    def _note_restart(self, state: RetryCallState) -> None:
        assert state.outcome is not None
        _write_int(self.files.restarts, state.attempt_number)
        self.log.warning(
            f"{state.outcome.exception()}; restart {state.attempt_number} "
            f"in {state.upcoming_sleep:.2f} s"
        )

    def _backoff(self, seconds: float) -> None:
        """A sleep that a stop request cuts short."""
        info = signal.sigtimedwait(_STOP, seconds)
        if info is not None:
            raise Stopping(info.si_signo)

    def _stop_child(self, stop: Stopping) -> None:
        child = self._child
        if child is None or child.poll() is not None:
            self.log.info(f"{stop}; no child running; supervisor done")
            return
        self.log.info(f"{stop}; sending SIGTERM to child pid {child.pid}")
        child.terminate()
        if not _reaped(child, self.policy.stop_timeout_s):
            self.log.warning(
                f"child pid {child.pid} still running after {self.policy.stop_timeout_s:g} s; "
                "sending SIGKILL"
            )
            child.kill()
            child.wait()
        self.log.info(f"child pid {child.pid} {describe(child.returncode)}; supervisor done")


def _in_child(parent: int, mask: Iterable[int], pidfile: Path) -> None:
    """Runs in the new child between fork and exec."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the supervisor died before the request took hold
        os._exit(1)
    _write_int(pidfile, os.getpid())


def _reaped(child: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while child.poll() is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        signal.sigtimedwait({signal.SIGCHLD}, remaining)
    return True


def _write_int(path: Path, value: int) -> None:
    """Replace atomically, so a reader never sees an empty or half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{value}\n")
    tmp.replace(path)


def _event_log(files: ServiceFiles) -> logging.Logger:
    """Events go to NAME.supervisor.log, and to stderr too unless stderr is that file."""
    files.supervisor_log.parent.mkdir(parents=True, exist_ok=True)
    log = logging.Logger(f"txstream.supervisor.{files.name}", logging.INFO)
    handlers: list[logging.Handler] = [logging.FileHandler(files.supervisor_log)]
    if not _same_file(sys.stderr.fileno(), files.supervisor_log):
        handlers.append(logging.StreamHandler(sys.stderr))
    fmt = logging.Formatter(f"%(asctime)s {files.name} supervisor[%(process)d] %(message)s")
    for handler in handlers:
        handler.setFormatter(fmt)
        log.addHandler(handler)
    return log


def _same_file(fd: int, path: Path) -> bool:
    a, b = os.fstat(fd), path.stat()
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class Supervised:
    """A service run under `txstream supervise`, as the stack starts, inspects and stops it.

    `marker` must appear in the child's command line (see ManagedProcess); by default it is
    the arguments after the program name, which survive a `#!` script's argv rewrite.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        settings: Settings,
        *,
        policy: Policy | None = None,
        marker: str | None = None,
    ) -> None:
        self.files = ServiceFiles(settings, name)
        self.argv = list(argv)
        self.policy = policy or Policy()
        run_dir = settings.run_dir
        self.supervisor = ManagedProcess(
            name, run_dir, marker=" ".join(_identity(settings, name)) + " ", suffix=".supervisor"
        )
        self.child = ManagedProcess(name, run_dir, marker=marker or " ".join(argv[1:] or argv))

    def start(self) -> int:
        """Spawn the supervisor detached and return its pid; the child follows shortly."""
        pid = self.supervisor.live_pid()
        if pid is not None:
            raise SupervisorError(f"{self.files.name} is already supervised by pid {pid}")
        self.child.stop()  # an orphan of a SIGKILLed supervisor, or a stale pidfile
        argv = [
            str(Path(sys.executable).with_name("txstream")),
            "supervise",
            *_identity(self.files.settings, self.files.name),
            *self.policy.cli_args(),
            "--",
            *self.argv,
        ]
        # the service talks to the broker these settings name, whatever the environment says
        settings = self.files.settings
        env = {**os.environ, "TXSTREAM_HOME": str(settings.home),
               "TXSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap_servers}  # fmt: skip
        return self.supervisor.spawn(argv, self.files.supervisor_log, env=env)

    def child_pid(self) -> int | None:
        return self.child.live_pid()

    def wait_child(self, timeout_s: float, replacing: int | None = None) -> int:
        """Poll until a live child other than `replacing` is recorded, while supervised."""

        def new_child() -> int | None:
            pid = self.child_pid()
            return None if pid == replacing else pid

        poll = Retrying(
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(0.02),
            retry=retry_if_result(
                lambda pid: pid is None and self.supervisor.live_pid() is not None
            ),
            retry_error_callback=lambda _: None,
        )
        pid: int | None = poll(new_child)
        if pid is None:
            raise SupervisorError(
                f"{self.files.name}: no new child within {timeout_s:g} s; "
                f"see {self.files.supervisor_log}"
            )
        return pid

    def restarts(self) -> int:
        try:
            return int(self.files.restarts.read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the supervisor (which stops the child), then any child it left behind.

        The default timeout outlasts the supervisor's own grace for its child, so the
        supervisor is not SIGKILLed while it is still stopping the child in order.
        """
        timeout_s = self.policy.stop_timeout_s + 5.0 if timeout_s is None else timeout_s
        stopped = self.supervisor.stop(timeout_s)
        stopped = self.child.stop(timeout_s) or stopped
        for path in self.files.run_files():
            path.unlink(missing_ok=True)
        return stopped
