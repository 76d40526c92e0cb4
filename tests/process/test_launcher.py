"""The launcher with real Ray processes on loopback (two Ray nodes: 127.0.0.2 head, 127.0.0.3 worker)."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from planner.commands import LAUNCHER

pytestmark = pytest.mark.slow
SERVER = """
import pathlib, signal, sys, time
state = pathlib.Path(sys.argv[1]); state.write_text("started")
def term(*_):
    time.sleep(1); state.write_text("drained"); sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(0.2)
"""


def launcher(role, *args, tmp_path, log_name):
    env = {**os.environ, "VLLM_GKE_STATE_DIR": str(tmp_path / f"state-{role}")}
    log = (tmp_path / log_name).open("w")
    return subprocess.Popen([sys.executable, str(LAUNCHER), role, *args], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def leader(tmp_path, port, *command, size=2, wait=60):
    return launcher("leader", "--group-size", str(size), "--gpus-per-node", "1", "--ray-port", str(port),
                    "--node-ip", "127.0.0.2", "--wait-timeout", str(wait), "--drain-timeout", "20", "--",
                    *command, tmp_path=tmp_path, log_name="leader.log")


def worker(tmp_path, port):
    # Ray's AF_UNIX socket paths must stay under 107 bytes: pytest's tmp_path is too deep.
    temp_dir = tempfile.mkdtemp(prefix="rw-", dir="/tmp")
    (tmp_path / "ray-worker-dir").write_text(temp_dir)
    return launcher("worker", "--leader-address", "127.0.0.2", "--gpus-per-node", "1", "--ray-port", str(port),
                    "--node-ip", "127.0.0.3", "--temp-dir", temp_dir, "--wait-timeout", "60",
                    tmp_path=tmp_path, log_name="worker.log")


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(autouse=True)
def no_ray_left_behind():
    yield
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True, check=False)


def group(tmp_path, port):
    state = tmp_path / "server.state"
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    lead = leader(tmp_path, port, sys.executable, str(script), str(state))
    time.sleep(3)
    work = worker(tmp_path, port)
    wait_for(lambda: state.exists(), 90, "the leader to start the server once the group is complete")
    return lead, work, state


def test_leader_alone_times_out_naming_the_missing_node(tmp_path):
    proc = leader(tmp_path, 6401, "sleep", "100", wait=8)
    assert proc.wait(90) == 1
    log = (tmp_path / "leader.log").read_text()
    assert "only 1/2 Ray nodes joined after 8 s" in log and "missing: 1 node(s), 1 GPU(s)" in log
    assert "starting the server" not in log


def test_losing_the_worker_stops_the_server_and_exits_non_zero(tmp_path):
    lead, work, state = group(tmp_path, 6402)
    assert "group complete: 2 nodes, 2 GPUs" in (tmp_path / "leader.log").read_text()
    os.killpg(work.pid, signal.SIGKILL)
    subprocess.run(["pkill", "-9", "-f", (tmp_path / "ray-worker-dir").read_text()], check=False)
    subprocess.run(["pkill", "-9", "-f", "node-ip-address=127.0.0.3"], check=False)
    assert lead.wait(60) == 3, "a lost Ray node must end the leader with exit 3"
    assert "Ray node lost (1/2 nodes alive" in (tmp_path / "leader.log").read_text()
    assert state.read_text() == "drained", "the server was stopped, not left running"


def test_a_server_that_exits_on_its_own_fails_the_group_even_with_code_0(tmp_path):
    # vLLM 0.25.1 exits 0 when its Ray executor loses a worker (seen on H200s): that must not read as success.
    lead = leader(tmp_path, 6406, sys.executable, "-c", "import time; time.sleep(2)")
    time.sleep(3)
    worker(tmp_path, 6406)
    assert lead.wait(90) == 5
    log = (tmp_path / "leader.log").read_text()
    assert "group complete: 2 nodes, 2 GPUs" in log
    assert "ERROR: server exited with 0 without being asked to stop" in log


def test_sigterm_drains_the_server_then_stops_ray(tmp_path):
    lead, _work, state = group(tmp_path, 6403)
    os.killpg(lead.pid, signal.SIGTERM)
    assert lead.wait(60) == 0
    assert state.read_text() == "drained"
    log = (tmp_path / "leader.log").read_text()
    assert "SIGTERM: draining the server" in log and "ray stopped" in log


def test_single_node_group_execs_the_command_without_ray(tmp_path):
    proc = launcher("leader", "--group-size", "1", "--gpus-per-node", "1", "--", sys.executable, "-c",
                    "print('served')", tmp_path=tmp_path, log_name="single.log")
    assert proc.wait(30) == 0
    log = (tmp_path / "single.log").read_text()
    assert "served" in log and "ray head" not in log


def test_worker_gives_up_when_the_head_never_answers(tmp_path):
    proc = launcher("worker", "--leader-address", "127.0.0.9", "--gpus-per-node", "1", "--ray-port", "6499",
                    "--wait-timeout", "3", tmp_path=tmp_path, log_name="lonely.log")
    assert proc.wait(30) == 1
    assert "did not answer within 3 s" in (tmp_path / "lonely.log").read_text()


def test_liveness_check_fails_on_a_stale_group_heartbeat(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "group-ok").write_text(str(time.time() - 120))
    env = {**os.environ, "VLLM_GKE_STATE_DIR": str(state_dir)}
    stale = subprocess.run([sys.executable, str(LAUNCHER), "check", "--max-age", "30"], env=env,
                           capture_output=True, text=True)
    assert stale.returncode == 1 and "heartbeat is 120 s old" in stale.stderr
    (state_dir / "group-ok").write_text(str(time.time()))
    assert subprocess.run([sys.executable, str(LAUNCHER), "check"], env=env).returncode == 0


def test_liveness_check_fails_without_a_heartbeat(tmp_path):
    # main returned 0 here, so a leader whose launcher never supervised a group could not fail liveness.
    env = {**os.environ, "VLLM_GKE_STATE_DIR": str(tmp_path / "empty")}
    result = subprocess.run([sys.executable, str(LAUNCHER), "check"], env=env, capture_output=True, text=True)
    assert result.returncode == 1 and "no group heartbeat" in result.stderr


def test_liveness_check_fails_when_the_server_stops_answering_health(tmp_path):
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        status = 200

        def do_GET(self):
            self.send_response(Health.status)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "group-ok").write_text(str(time.time()))
    env = {**os.environ, "VLLM_GKE_STATE_DIR": str(state_dir)}
    url = f"http://127.0.0.1:{server.server_port}/health"

    def check():
        return subprocess.run([sys.executable, str(LAUNCHER), "check", "--health-url", url, "--health-timeout", "2"],
                              env=env, capture_output=True, text=True)

    try:
        assert check().returncode == 0
        Health.status = 503
        answer = check()
        assert answer.returncode == 1 and "did not answer" in answer.stderr and "503" in answer.stderr
    finally:
        server.shutdown()
    refused = check()
    server.server_close()
    assert refused.returncode == 1, "a server that no longer listens fails liveness"


def test_ray_health_checks_tolerate_a_stall_of_ten_seconds():
    # Ray declares a node dead after failure_threshold missed checks, one per period: at 1 s x 5 (main) a 5 s
    # network or GCS stall recreated the whole group. Ray's defaults (ray_config_def.h) tolerate 15 s.
    import importlib.util

    spec = importlib.util.spec_from_file_location("launcher", LAUNCHER)
    launcher_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher_module)
    env = launcher_module.RAY_HEALTH_ENV
    tolerated_ms = int(env["RAY_health_check_period_ms"]) * int(env["RAY_health_check_failure_threshold"])
    assert tolerated_ms >= 10_000


def test_bad_flags_exit_2_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(LAUNCHER), "leader", "--gpus-per-node", "1"], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "--group-size" in result.stderr and "Traceback" not in result.stderr


def test_a_one_node_server_forks_its_engine_core_and_keeps_tritons_cache_in_the_carried_root(tmp_path):
    """The two start-up defaults (docs/benchmarks.md "Engine start levers"): VLLM_WORKER_MULTIPROC_METHOD=fork
    for one-node groups, TRITON_CACHE_DIR inside vLLM's cache root when the compile cache is carried; an explicit
    setting wins."""
    show = "import os; print(os.environ.get('VLLM_WORKER_MULTIPROC_METHOD'), os.environ.get('TRITON_CACHE_DIR'))"
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_WORKER_MULTIPROC_METHOD", "TRITON_CACHE_DIR")}
    env |= {"VLLM_CACHE_ROOT": str(tmp_path / "root"), "VLLM_GKE_STATE_DIR": str(tmp_path / "state")}
    cmd = [sys.executable, str(LAUNCHER), "leader", "--group-size", "1", "--gpus-per-node", "0",
           "--compile-cache-store", str(tmp_path / "store"), "--compile-cache-key", "k", "--compile-cache-timeout",
           "1", "--", sys.executable, "-c", show]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out[-2:] == ["fork", str(tmp_path / "root" / "triton")]
    env |= {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "TRITON_CACHE_DIR": str(tmp_path / "mine")}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out[-2:] == ["spawn", str(tmp_path / "mine")]
