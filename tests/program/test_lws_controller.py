"""LwsController under Pulumi's mocks: the pinned chart when asked for, nothing otherwise."""

from planner.versions import LWS_CHART, LWS_VERSION
from tests.helpers import full_config
from tools.mocks import run_program

RELEASE = "kubernetes:helm.sh/v3:Release"


def test_the_lws_chart_is_installed_at_the_pinned_version_and_waited_for():
    release = run_program(full_config()).one(RELEASE, "lws").inputs
    assert release["chart"] == LWS_CHART and release["version"] == LWS_VERSION.removeprefix("v")
    assert release["atomic"] is True, "LWS objects are rejected until the controller and its webhook serve"


def test_install_lws_false_installs_nothing_and_the_group_does_not_wait_for_it():
    rec = run_program(full_config(serving={"installLws": False}))
    assert rec.of_type(RELEASE) == []
    lws = rec.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    assert all("Release" not in dep for dep in lws.dependencies)
