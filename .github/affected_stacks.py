#!/usr/bin/env python3
"""Which stacks a pull request affects, as a GitHub Actions output line: stacks=["dev","prod"].

    python3 .github/affected_stacks.py BASE_SHA        (compares BASE_SHA...HEAD)
    python3 .github/affected_stacks.py --files F...    (the same decision for a given list of changed files)

A change to Pulumi.<stack>.yaml affects that stack; a change to anything the program reads (code,
Pulumi.yaml, requirements.txt, models/, images/, policy/) affects every stack; docs, tests, bench/ and
workflows affect none.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACK_FILE = re.compile(r"^Pulumi\.([A-Za-z0-9_.-]+)\.yaml$")
PROGRAM = ("__main__.py", "Pulumi.yaml", "requirements.txt")
PROGRAM_DIRS = ("components/", "planner/", "models/", "images/", "policy/")


def all_stacks(root: Path = ROOT) -> list[str]:
    return sorted(m.group(1) for p in root.glob("Pulumi.*.yaml") if (m := STACK_FILE.match(p.name)))


def affected(changed: list[str], stacks: list[str]) -> list[str]:
    if any(f in PROGRAM or f.startswith(PROGRAM_DIRS) for f in changed):
        return stacks
    named = {m.group(1) for f in changed if (m := STACK_FILE.match(f))}
    return [s for s in stacks if s in named]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--files"]:
        changed = argv[1:]
    elif len(argv) == 1:
        diff = subprocess.run(["git", "diff", "--name-only", f"{argv[0]}...HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=False)
        if diff.returncode:
            print(f"affected_stacks: git diff against {argv[0]} failed: {diff.stderr.strip()}", file=sys.stderr)
            return 2
        changed = diff.stdout.split()
    else:
        print("usage: affected_stacks.py BASE_SHA | --files FILE...", file=sys.stderr)
        return 2
    print("stacks=" + json.dumps(affected(changed, all_stacks())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
