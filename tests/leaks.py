"""A pytest plugin (tests/conftest.py loads it): the suite leaves no process behind.

At start-up the pytest process becomes a child subreaper (Linux prctl PR_SET_CHILD_SUBREAPER): whatever a test
starts stays a descendant of pytest even when it detaches into a session of its own and its parent exits (`ray
start` daemons, the launcher's cache publisher, a server in its own process group). When the session ends, after
every fixture's teardown, each descendant still running is a leak: it is listed with its command line, killed, and
the run fails. Orphans that exit meanwhile are reaped only then, so no test's own `wait()` loses its child's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time

import psutil
import pytest

PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 15.0
"""Teardowns that signal and return (ray stop, killpg) get this long for their processes to exit."""
_LEAKS = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        raise pytest.UsageError(f"tests/leaks.py: prctl(PR_SET_CHILD_SUBREAPER) failed: {reason}")
    config.stash[_LEAKS] = []


def _running_descendants() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} ({process.status()}): {' '.join(process.cmdline())[:300]}"
    except psutil.Error:
        return f"pid {process.pid} (gone while listed)"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := _running_descendants()) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.5)
    leaks = [_describe(p) for p in left]
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    _reap()
    if leaks:
        session.config.stash[_LEAKS] = leaks
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    leaks = config.stash.get(_LEAKS, [])
    if leaks:
        terminalreporter.section("processes left running", sep="=", red=True, bold=True)
        terminalreporter.write_line(f"{len(leaks)} process(es) the tests started were still running "
                                    f"{GRACE_SECONDS:.0f} s after the last teardown (killed now; the run fails):")
        for line in leaks:
            terminalreporter.write_line(f"  {line}")
