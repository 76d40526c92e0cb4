"""A pytest plugin (tests/conftest.py loads it): the suite leaves no process behind.

At start-up the run gets a token of its own in the environment variable VLLM_GKE_TEST_RUN; every process a test
starts inherits it, also one that detaches into a session of its own and outlives its parent (`ray start` daemons,
the launcher's cache publisher, a server in its own process group). When the session ends, after every fixture's
teardown and a grace period, each running process that carries the token is a leak: it is listed with its command
line, killed, and the run fails. (A child subreaper was tried first: orphans then stay pytest's zombies until the
end, and `ray stop` waited on them past its 20 s budget.) Pods run by tools/pod_runner.py get exactly their rendered
env, so they do not carry it; the runner kills them with their network namespaces.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import psutil
import pytest

MARKER = "VLLM_GKE_TEST_RUN"
GRACE_SECONDS = 15.0
"""Teardowns that signal and return (ray stop, killpg) get this long for their processes to exit."""
_LEAKS = pytest.StashKey[list[str]]()
_TOKEN = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    token = uuid.uuid4().hex
    os.environ[MARKER] = token
    config.stash[_TOKEN] = token
    config.stash[_LEAKS] = []


def _running_with(token: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(MARKER) == token:
                found.append(process)
    return found


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} ({process.status()}): {' '.join(process.cmdline())[:300]}"
    except psutil.Error:
        return f"pid {process.pid} (gone while listed)"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    token = session.config.stash.get(_TOKEN, "")
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := _running_with(token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    leaks = [_describe(p) for p in left]
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
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
