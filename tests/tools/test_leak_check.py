"""tests/leaks.py, the suite's end check, in a pytest of its own: a process a test leaves running fails the run
(also one that detached into its own session, or whose parent already exited) and is killed; a clean run passes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def run_inner(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(f"import subprocess\n\n\ndef test_inner():\n{body}")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.leaks", "-c", os.devnull,
                           "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)


def sleepers(seconds: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-2:] == ["sleep", seconds]]


def test_a_process_left_in_its_own_session_fails_the_run_and_is_killed(tmp_path):
    done = run_inner(tmp_path, '    subprocess.Popen(["sleep", "301.25"], start_new_session=True)\n')
    assert done.returncode == 1, done.stdout[-2000:]
    assert "processes left running" in done.stdout and "sleep 301.25" in done.stdout, done.stdout[-2000:]
    assert not sleepers("301.25"), "the check kills what it found"


def test_an_orphan_whose_parent_exited_is_still_found(tmp_path):
    done = run_inner(tmp_path, '    subprocess.run(["sh", "-c", "setsid sleep 302.5 >/dev/null 2>&1 &"], check=True)\n')
    assert done.returncode == 1 and "sleep 302.5" in done.stdout, done.stdout[-2000:]
    time.sleep(0.5)
    assert not sleepers("302.5")


def test_a_test_that_stops_what_it_started_passes(tmp_path):
    done = run_inner(tmp_path, '    p = subprocess.Popen(["sleep", "303.75"], start_new_session=True)\n'
                               '    p.kill()\n    p.wait()\n')
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]
    assert "processes left running" not in done.stdout
