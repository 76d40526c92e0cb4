"""What `make test` needs from the machine besides Python packages: found where it already is, installed when not.

    python3 tools/host_tools.py           find, install what is missing, print what is used
    python3 tools/host_tools.py --check   find only; exit 1 naming what is missing

Needed: bubblewrap (`bwrap`), util-linux `setpriv` and iproute2 `ip` for the pod runner (tools/pod_runner.py); a
Chromium-family browser and its chromedriver for the chat page's browser tests (Selenium); Python 3.11 (what the
lock files are compiled for) with its `venv` module.
Found: programs on PATH; the browser as $CHROME_BIN, `chromium`, `chromium-browser`, `google-chrome` or
`google-chrome-stable`; the driver as $CHROMEDRIVER, `chromedriver` on PATH or $CHROMEWEBDRIVER/chromedriver (GitHub's
Ubuntu runner images carry Google Chrome and set CHROMEWEBDRIVER; Ubuntu's own chromium is a snap, not usable there).
What is missing comes from Debian/Ubuntu packages with apt-get: directly as root, through `sudo -n` otherwise
(passwordless sudo, as on GitHub's runners); with neither, one line names what is missing and the exit is 1.
Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass(frozen=True)
class Need:
    what: str
    package: str
    """The Debian/Ubuntu package that provides it."""


PROGRAMS = {"bwrap": Need("bubblewrap (pod runner)", "bubblewrap"),
            "setpriv": Need("setpriv (pod runner)", "util-linux"),
            "ip": Need("ip (pod runner)", "iproute2")}


def _executable(path: str | os.PathLike[str] | None) -> str | None:
    return str(path) if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def browser() -> str | None:
    """The Chromium-family browser the browser tests drive, or None."""
    return _executable(os.environ.get("CHROME_BIN")) or next(
        (found for name in BROWSERS if (found := shutil.which(name))), None)


def chromedriver() -> str | None:
    """The chromedriver that drives it, or None."""
    web_driver_dir = os.environ.get("CHROMEWEBDRIVER")
    return (_executable(os.environ.get("CHROMEDRIVER")) or shutil.which("chromedriver")
            or _executable(web_driver_dir and Path(web_driver_dir) / "chromedriver"))


def missing(python: str) -> list[Need]:
    """What this machine lacks, each with the package that brings it."""
    needs = [need for program, need in PROGRAMS.items() if not shutil.which(program)]
    if not (browser() and chromedriver()):
        needs += [Need("a Chromium-family browser and chromedriver (browser tests)", "chromium"),
                  Need("chromedriver", "chromium-driver")]
    if subprocess.run([python, "-c", "import ensurepip, venv"], capture_output=True).returncode:
        needs.append(Need(f"the venv module of {python}", "python3-venv"))
    return needs


def python_problem(python: str) -> str | None:
    """Why `python` cannot build the virtualenvs (the lock files are compiled for Python 3.11), or None."""
    done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:3], sep='.')"], capture_output=True,
                          text=True)
    if done.returncode:
        return f"PYTHON={python} does not run ({(done.stderr.strip().splitlines() or ['no output'])[-1]})"
    version = tuple(int(part) for part in done.stdout.split("."))
    if version[:2] != (3, 11):
        return f"PYTHON={python} is Python {done.stdout.strip()}; the lock files are for Python 3.11 (make PYTHON=...)"
    return None


def privilege() -> list[str] | None:
    """The prefix that runs apt-get with root's rights here: nothing as root, `sudo -n` with passwordless sudo."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def install(needs: list[Need]) -> None:
    prefix = privilege()
    packages = sorted({need.package for need in needs})
    if prefix is None:
        raise SystemExit(f"host tools: missing {'; '.join(n.what for n in needs)}; installing them "
                         f"(apt-get install {' '.join(packages)}) needs root or passwordless sudo")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        if subprocess.run([*prefix, *command], env=env).returncode:
            raise SystemExit(f"host tools: `{' '.join([*prefix, *command])}` failed; needed: "
                             f"{'; '.join(n.what for n in needs)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 when something is missing")
    parser.add_argument("--python", default=sys.executable, help="the interpreter make builds its virtualenvs with")
    args = parser.parse_args(argv)
    if problem := python_problem(args.python):
        print(f"host tools: {problem}", file=sys.stderr)
        return 1
    needs = missing(args.python)
    if needs and args.check:
        print(f"host tools: missing {'; '.join(n.what for n in needs)}", file=sys.stderr)
        return 1
    if needs:
        install(needs)
        if still := missing(args.python):
            print(f"host tools: still missing after apt-get: {'; '.join(n.what for n in still)}", file=sys.stderr)
            return 1
    print(f"host tools: bwrap {shutil.which('bwrap')}, browser {browser()}, driver {chromedriver()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
