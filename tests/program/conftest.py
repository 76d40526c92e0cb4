"""The program tier: runs with the same inputs share one recording (tools/mocks.py SHARED; test_program.py holds that
two runs record the same), and the fixtures shared by the routing tests (test_routing.py, test_router_rules.py)."""

from __future__ import annotations

import pytest

from tests.program.test_routing import dev
from tools import mocks
from tools.mocks import Recording, run_program

mocks.share_recordings()


@pytest.fixture(scope="module")
def epp() -> Recording:
    """The dev stack with two replicas behind the endpoint picker and its Envoy (serving.routing epp)."""
    return run_program(dev("epp"))


@pytest.fixture(scope="module")
def gateway() -> Recording:
    """The dev stack with two replicas behind GKE Inference Gateway (serving.routing gke-gateway)."""
    return run_program(dev("gke-gateway"))
