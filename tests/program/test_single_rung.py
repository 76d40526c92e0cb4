"""A one-zone, one-option stack renders exactly what it rendered before several zones, provisioning lists and
fallbacks existed (issue 32): every resource's type, logical name and inputs, compared with snapshots taken from
main at 2b8cf4f (tests/program/golden/, written by the loop below before the change); the download
script they carry inline is today's images/model-downloader/download.py."""

import json
from pathlib import Path

import pytest

from tests.helpers import accel, full_config
from tools.mocks import run_program

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "dev": lambda: full_config("dev"),
    "prod": lambda: full_config("prod"),
    "dev-spot-headroom": lambda: full_config(
        "dev", accelerator=accel("nvidia-l4", "g2-standard-8", provisioning="spot"),
        autoscaling={"minReplicas": 1, "maxReplicas": 3, "headroom": 1}),
    "prod-reservation": lambda: full_config(
        "prod", accelerator={"type": "nvidia-h100-mega-80gb", "zones": ["us-central1-b"],
                             "provisioning": "reservation", "reservation": "my-res"}),
}


def rendered(config: dict) -> list:
    rows = sorted(([r.type, r.name, r.inputs] for r in run_program(config).resources), key=lambda r: (r[0], r[1]))
    return json.loads(json.dumps(rows, sort_keys=True, default=str))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_one_zone_one_option_stack_renders_exactly_what_it_did_before(case):
    expected = json.loads((GOLDEN / f"{case}.json").read_text())
    got = rendered(CASES[case]())
    assert [row[:2] for row in got] == [row[:2] for row in expected]
    for (type_token, name, inputs), (_, _, before) in zip(got, expected, strict=True):
        assert inputs == before, f"{type_token} {name} changed"
