"""tools/host_tools.py: what make test needs from the machine is taken where the machine has it (GitHub's runners
carry Google Chrome and name its driver's folder in CHROMEWEBDRIVER), and what is missing is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import host_tools

ROOT = Path(__file__).resolve().parents[2]


def fake(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_google_chrome_and_the_driver_in_chromewebdriver_are_used_as_on_githubs_runners(tmp_path, monkeypatch):
    chrome = fake(tmp_path / "bin" / "google-chrome")
    driver = fake(tmp_path / "chromedriver-linux64" / "chromedriver")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CHROMEWEBDRIVER", str(driver.parent))
    for name in ("CHROME_BIN", "CHROMEDRIVER"):
        monkeypatch.delenv(name, raising=False)
    assert (host_tools.browser(), host_tools.chromedriver()) == (str(chrome), str(driver))
    monkeypatch.setenv("CHROMEDRIVER", str(fake(tmp_path / "other" / "chromedriver")))
    assert host_tools.chromedriver() == str(tmp_path / "other" / "chromedriver"), "an explicit CHROMEDRIVER wins"


def test_check_names_each_missing_tool_and_its_package(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "host_tools.py"), "--check", "--python",
                           sys.executable], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout
    for what in ("bubblewrap", "setpriv", "ip (pod runner)", "Chromium-family browser"):
        assert what in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_python_the_locks_were_not_compiled_for_is_refused_in_one_line(tmp_path):
    other = fake(tmp_path / "python3.13")
    other.write_text("#!/bin/sh\necho 3.13.1\n")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "host_tools.py"), "--check", "--python", str(other)],
                          env={**os.environ}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is Python 3.13.1; the lock files are for Python 3.11" in done.stderr, done.stderr
