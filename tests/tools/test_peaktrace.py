"""bench/peaktrace: the site hook that records where vLLM's profiled peak and CUDA-graph capture go.

The replay functions run on allocator histories written here in torch's own snapshot format (device_traces of
alloc / free_requested / free_completed / segment_alloc events, segments with their pool ids); the garbage-collection
probe on real reference cycles; the hook in a fresh interpreter that imports vLLM 0.32.0's GPU worker.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "bench" / "peaktrace"
_spec = importlib.util.spec_from_file_location("peaktrace_hook", HOOK / "sitecustomize.py")
peaktrace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peaktrace)
GIB = 2**30


def _alloc(addr, size, name="forward"):
    return {"action": "alloc", "addr": addr, "size": size,
            "frames": [{"filename": "/site/vllm/model_executor/models/x.py", "line": 1, "name": name}]}


def _free(addr, size):
    return [{"action": "free_requested", "addr": addr, "size": size},
            {"action": "free_completed", "addr": addr, "size": size}]


def test_the_peak_is_replayed_with_the_blocks_live_then_and_when_each_was_freed():
    trace = [_alloc(1, GIB, "workspace"), _alloc(2, 2 * GIB, "transient"), *_free(2, 2 * GIB),
             _alloc(3, GIB // 2, "held"), _alloc(4, 3 * GIB, "logits"), *_free(4, 3 * GIB), *_free(3, GIB // 2)]
    summary = peaktrace.summarize({"device_traces": [trace]}, 0)
    assert summary["peak_gib"] == 4.5 and summary["live_blocks"] == 3
    assert trace[summary["peak_event"]]["addr"] == 4
    by_size = {b["gib"]: b for b in summary["largest"]}
    assert by_size[1.0]["freed_at"] is None and by_size[0.5]["freed_at"] == len(trace) - 1
    assert by_size[3.0]["frames"][0].startswith("model_executor/models/x.py:1 logits")
    assert summary["free_requested_before_peak_gib"] == 0.0


def test_the_profile_runs_own_peak_is_told_from_the_estimates_after_it():
    """vLLM logs the peak of profile_run, which determine_available_memory reads before the CUDA-graph estimate runs:
    the marker allocation _marked_profile_run makes when profile_run returns splits the history there."""
    mark = {"action": "alloc", "addr": 9, "size": peaktrace.PROFILE_RUN_MARK_BYTES,
            "frames": [{"filename": "/bench/peaktrace/sitecustomize.py", "line": 1, "name": "marked_profile_run"}]}
    trace = [_alloc(1, GIB, "workspace"), _alloc(2, GIB // 2, "live"), *_free(2, GIB // 2), *_free(1, GIB), mark,
             _alloc(3, 3 * GIB, "estimate"), *_free(3, 3 * GIB)]
    summary = peaktrace.summarize({"device_traces": [trace]}, 0)
    assert summary["peak_gib"] == round((3 * GIB + peaktrace.PROFILE_RUN_MARK_BYTES) / GIB, 4)
    assert summary["profile_run"]["peak_gib"] == 1.5 and summary["profile_run"]["live_blocks"] == 2
    unmarked = [e for e in trace if e is not mark]
    assert "profile_run" not in peaktrace.summarize({"device_traces": [unmarked]}, 0)
    same_size = {**mark, "frames": _alloc(9, 1)["frames"]}  # the size alone is not the marker
    assert "profile_run" not in peaktrace.summarize({"device_traces": [[*unmarked[:4], same_size]]}, 0)


def test_a_capture_summary_counts_the_segments_left_reserved_and_the_graph_pools():
    trace = [{"action": "segment_alloc", "addr": 0, "size": 4 * GIB, "frames": []},
             {"action": "segment_alloc", "addr": 8, "size": GIB, "frames": []},
             {"action": "segment_free", "addr": 8, "size": GIB},
             _alloc(0, 4 * GIB, "out_accum")]
    trace += [{"action": "segment_alloc", "addr": 64, "size": 2 * GIB,
               "frames": [{"filename": "/site/vllm/x.py", "line": 1, "name": "warmup"}]},
              _alloc(64, GIB, "context"), *_free(64, GIB)]
    segments = [{"device": 0, "segment_pool_id": (1, 0), "total_size": 4 * GIB, "allocated_size": 0, "address": 0},
                {"device": 0, "segment_pool_id": (0, 0), "total_size": 2 * GIB, "allocated_size": 0, "address": 64}]
    summary = peaktrace.summarize_capture({"device_traces": [trace], "segments": segments}, 0)
    assert summary["segments_reserved_gib"] == 6.0
    assert summary["kept_outside_pools_gib"] == 2.0
    [kept] = summary["kept_outside_pools"]
    assert kept["blocks"] == 1 and kept["reserved_by"][0].startswith("x.py:1 warmup")
    assert kept["last_block"][0].startswith("model_executor/models/x.py:1 context")
    assert (summary["pool_segments"], summary["pool_total_gib"], summary["pool_allocated_gib"]) == (1, 4.0, 0.0)
    assert summary["largest_allocs"][0]["gib"] == 4.0


def test_a_collection_that_frees_memory_held_by_a_cycle_is_reported():
    allocated = [0]

    class Held:
        def __init__(self):
            allocated[0] += GIB
            self.me = self

        def __del__(self):
            allocated[0] -= GIB

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory_allocated=lambda: allocated[0]))
    gc.collect()
    probe = peaktrace._Collections(fake_torch)
    probe.start()
    try:
        Held()
        gc.collect()
    finally:
        out = probe.stop()
    assert out["freed_gib"] == 1.0 and out["freeing"][0]["generation"] == 2
    assert probe not in gc.callbacks


def test_the_holders_of_tensors_in_a_cycle_are_named_down_to_the_frame_and_local():
    """A tensor kept by a caught exception's traceback (frame -> locals -> tensor, the exception -> traceback ->
    frame): the explicit gc.collect() made while the probe runs names that chain, the exception, and frees it."""
    allocated = [0]

    class Storage:
        def __init__(self, size):
            self.size = size

        def nbytes(self):
            return self.size

        def data_ptr(self):
            return id(self)

    class Tensor:
        is_cuda = True
        shape = (8192, 4096)
        dtype = "bfloat16"

        def __init__(self, size):
            allocated[0] += size
            self.storage, self.size = Storage(size), size

        def untyped_storage(self):
            return self.storage

        def __del__(self):
            allocated[0] -= self.size

    class Traced(Tensor):  # a fake tensor: no storage behind it
        def __init__(self):
            super().__init__(0)

        def untyped_storage(self):
            raise RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor, FunctionalTensor)")

    class Gone:
        pass

    fake_torch = types.SimpleNamespace(Tensor=Tensor, cuda=types.SimpleNamespace(memory_allocated=lambda: allocated[0]))

    def first_run():
        hidden = Tensor(GIB)  # noqa: F841 - the local the traceback's frame keeps
        raise RuntimeError("retry with the general shape")

    def caller():
        try:
            first_run()
        except RuntimeError as exc:
            kept = exc  # noqa: F841 - exc -> traceback -> this frame -> kept: a cycle
            traced = Traced()  # noqa: F841
            proxy = weakref.proxy(Gone())  # noqa: F841 - dead at once: touching it raises ReferenceError

    gc.collect()
    probe = peaktrace._Holders(fake_torch)
    probe.start()
    try:
        caller()
        assert allocated[0] == GIB
        gc.collect()
    finally:
        calls = probe.stop()
    assert gc.collect is not probe.collect and allocated[0] == 0
    (call,) = calls
    assert call["freed_gib"] == 1.0 and call["cuda_tensor_gib"] == 1.0
    (chain,) = call["chains"]
    assert chain.startswith("frame ") and "first_run ['hidden']" in chain, chain
    assert call["exceptions"][0]["type"] == "RuntimeError"
    assert call["exceptions"][0]["text"] == "retry with the general shape"


def test_the_hook_wraps_vllms_worker_only_when_asked(tmp_path):
    pytest.importorskip("vllm")
    code = ("import vllm.v1.worker.gpu_worker as m; W = m.Worker; "
            "print(W.determine_available_memory.__qualname__, W.compile_or_warm_up_model.__qualname__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK), str(ROOT)])}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    traced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**env, "VLLM_GKE_PEAK_TRACE": str(tmp_path), "VLLM_GKE_PEAK_TRACE_CAPTURE": "1"})
    assert plain.returncode == traced.returncode == 0, plain.stderr[-2000:] + traced.stderr[-2000:]
    assert plain.stdout.split() == ["Worker.determine_available_memory", "Worker.compile_or_warm_up_model"]
    assert traced.stdout.split() == ["peaktrace.determine_available_memory", "peaktrace.compile_or_warm_up_model"]
    runner = ("import vllm.v1.worker.gpu_worker; import vllm.v1.worker.gpu_model_runner as r; "
              "print(r.GPUModelRunner.profile_run.__name__)")
    marked = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=300,
                            env={**env, "VLLM_GKE_PEAK_TRACE": str(tmp_path)})
    assert marked.returncode == 0 and marked.stdout.split() == ["marked_profile_run"], marked.stderr[-2000:]
    sampled = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env={**env, "VLLM_GKE_PEAK_TRACE": str(tmp_path), "VLLM_GKE_GRAPH_SAMPLES": "1"})
    assert sampled.returncode == 0, sampled.stderr[-2000:]
    assert sampled.stdout.split() == ["Worker.determine_available_memory", "peaktrace.compile_or_warm_up_model"]


def test_a_recorded_worker_method_returns_its_result_and_writes_its_summary(tmp_path, monkeypatch):
    """_record around a worker method, with an allocator whose history the method's allocations fill: the method's
    result comes back unchanged, recording is switched off after it, and <model><suffix> holds the replayed peak (with
    the probe's fields for the profile, without them for the capture)."""
    history: dict = {"on": False, "trace": []}

    def record(enabled="all", **_):
        history["on"] = enabled is not None

    memory = types.SimpleNamespace(_record_memory_history=record,
                                   _snapshot=lambda: {"device_traces": [history["trace"]], "segments": []})
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        memory=memory, memory_allocated=lambda: 0, max_memory_allocated=lambda: 3 * GIB, current_device=lambda: 0))

    class Worker:
        model_config = types.SimpleNamespace(model="/models/tiny-2")

        def determine_available_memory(self):
            assert history["on"]
            history["trace"] += [_alloc(1, 2 * GIB), *_free(1, 2 * GIB)]
            return 42

        def compile_or_warm_up_model(self):
            return "compiled"

    monkeypatch.setenv("VLLM_GKE_PEAK_TRACE", str(tmp_path / "out"))
    peaktrace._record(Worker, "determine_available_memory", ".json", peaktrace.summarize, fake_torch, True)
    peaktrace._record(Worker, "compile_or_warm_up_model", ".capture.json", peaktrace.summarize_capture, fake_torch,
                      False)
    assert Worker().determine_available_memory() == 42 and not history["on"]
    assert Worker().compile_or_warm_up_model() == "compiled"
    profile = json.loads((tmp_path / "out" / "tiny-2.json").read_text())
    assert profile["peak_gib"] == 2.0 and profile["max_allocated_gib"] == 3.0 and "gc" in profile
    capture = json.loads((tmp_path / "out" / "tiny-2.capture.json").read_text())
    assert capture["events"] == 3 and "gc" not in capture


def test_the_router_fake_lets_a_fake_tensor_trace_run_an_op_that_had_none():
    """register_router_fake on a real torch op with grouped_topk's schema and no fake: before, fake tensors cannot
    run it (what made vLLM 0.25.1's router compile raise); after, they get 0.32.0's shapes and dtypes; a second
    registration is refused, as vLLM 0.32.0's own fake refuses this one."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    lib = torch.library.Library("vllmgke_router_test", "DEF")
    lib.define("grouped_topk(Tensor scores, int num_expert_group, int topk_group, int topk, bool renormalize, "
               "float routed_scaling_factor, Tensor bias, int scoring_func=0) -> (Tensor, Tensor)")
    op = torch.ops.vllmgke_router_test.grouped_topk
    with FakeTensorMode() as mode:
        scores, bias = mode.from_tensor(torch.empty(8192, 128)), mode.from_tensor(torch.empty(128))
        with pytest.raises(Exception):  # noqa: B017 - no fake or Meta kernel: torch raises one of several types
            op(scores, 1, 1, 8, True, 1.0, bias, 1)
    assert peaktrace.register_router_fake(torch, "vllmgke_router_test::grouped_topk")
    with FakeTensorMode() as mode:
        scores, bias = mode.from_tensor(torch.empty(8192, 128)), mode.from_tensor(torch.empty(128))
        weights, ids = op(scores, 1, 1, 8, True, 1.0, bias, 1)
    assert (tuple(weights.shape), weights.dtype, tuple(ids.shape), ids.dtype) == ((8192, 8), torch.float32,
                                                                                 (8192, 8), torch.int32)
    assert not peaktrace.register_router_fake(torch, "vllmgke_router_test::grouped_topk")
    assert not peaktrace.register_router_fake(torch, "vllmgke_router_test::no_such_op")


def test_each_graph_profile_capture_is_summarised_between_its_markers():
    """_marked_captures around a runner whose captures allocate into a fake allocator history, then summarize_graphs:
    each capture's mode, tokens and free-memory drop, the segments it reserved with the allocation that needed each
    (the second capture's 24 MiB gate-up output, for which the pool had no block left), and nothing of the other."""
    trace: list = []
    free = {"bytes": 80 * GIB}

    def empty(size, dtype=None, device=None):
        trace.append({"action": "alloc", "addr": 10**9 + len(trace), "size": size,
                      "frames": [{"filename": str(HOOK / "sitecustomize.py"), "line": 1, "name": "marked"}]})

    fake_torch = types.SimpleNamespace(empty=empty, uint8="uint8", cuda=types.SimpleNamespace(
        synchronize=lambda: None, mem_get_info=lambda: (free["bytes"], 80 * GIB)))

    class Runner:
        device = "cuda:0"

        def _warmup_and_capture(self, desc, cudagraph_runtime_mode=None, profile_seq_lens=None):
            if desc.num_tokens == 496:
                trace.append({"action": "segment_alloc", "addr": 5, "size": 26 * 2**20, "frames": []})
                trace.append(_alloc(5, 24 * 2**20, "gate_up"))
                free["bytes"] -= 26 * 2**20
            trace.append(_alloc(7, 2**19, "small"))
            trace.append(_alloc(9, peaktrace.MARK_BYTES + 512, "same size as a marker, not one"))
            return desc.num_tokens

    peaktrace.CAPTURES.clear()
    peaktrace._marked_captures(Runner, fake_torch)
    mode = types.SimpleNamespace(name="PIECEWISE")
    assert Runner()._warmup_and_capture(types.SimpleNamespace(num_tokens=512), cudagraph_runtime_mode=mode) == 512
    Runner()._warmup_and_capture(types.SimpleNamespace(num_tokens=496), cudagraph_runtime_mode=mode)
    summary = peaktrace.summarize_graphs({"device_traces": [trace]}, 0)
    first, second = summary["captures"]
    assert (first["mode"], first["tokens"], first["took_mib"], first["segments"]) == ("PIECEWISE", 512, 0.0, [])
    assert (second["tokens"], second["took_mib"], second["segments_reserved_mib"]) == (496, 26.0, 26.0)
    [segment] = second["segments"]
    assert segment["for_mib"] == 24.0 and segment["frames"][0].startswith("model_executor/models/x.py:1 gate_up")
    assert [a["mib"] for a in second["large_allocs"]] == [24.0]
    peaktrace.CAPTURES.clear()


def test_the_hook_records_only_the_v1_graph_profile_when_asked(tmp_path):
    pytest.importorskip("vllm")
    code = ("import vllm.v1.worker.gpu_worker as m; import vllm.v1.worker.gpu_model_runner as r; "
            "R = r.GPUModelRunner; print(m.Worker.determine_available_memory.__qualname__, "
            "R.profile_cudagraph_memory.__qualname__, R._warmup_and_capture.__qualname__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK), str(ROOT)]),
           "VLLM_GKE_PEAK_TRACE": str(tmp_path), "VLLM_GKE_PEAK_TRACE_GRAPHS": "1"}
    traced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert traced.stdout.split() == ["Worker.determine_available_memory", "peaktrace.profile_cudagraph_memory",
                                     "peaktrace._warmup_and_capture"]


def test_full_graph_samples_are_the_free_memory_each_v2_full_capture_took(tmp_path, monkeypatch):
    """--sample-graphs: the graphs Model Runner V2's CudaGraphManager.capture opens are sampled (free memory before
    and after each), the PIECEWISE graphs vLLM's CUDAGraphWrapper opens elsewhere are not, the file holds the drops so
    far after each graph (the server is stopped once the capture has logged), and torch.cuda.graph is restored."""
    mib = 2**20
    free = [100 * mib]

    class Graph:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        graph=Graph, synchronize=lambda: None, mem_get_info=lambda: (free[0], 200 * mib)))

    def take(n):
        free[0] -= n * mib

    def captures(path: str, sizes: list[int]) -> types.FunctionType:
        code = "def run(torch, take):\n" + "".join(
            f"    with torch.cuda.graph(None):\n        take({n})\n" for n in sizes)
        namespace: dict = {}
        exec(compile(code, path, "exec"), namespace)
        return namespace["run"]

    full = captures("/site/vllm/v1/worker/gpu/cudagraph_utils.py", [5, 1, 0])
    piecewise = captures("/site/vllm/compilation/cuda_graph.py", [7])
    seen = {}

    class Worker:
        model_config = types.SimpleNamespace(model="/models/Qwen3-8B")

        def compile_or_warm_up_model(self):
            piecewise(torch, take)
            full(torch, take)
            seen["during"] = json.loads((tmp_path / "Qwen3-8B.samples.json").read_text())
            return "captured"

    monkeypatch.setenv("VLLM_GKE_PEAK_TRACE", str(tmp_path))
    peaktrace._sample_full_graphs(Worker, torch)
    assert Worker().compile_or_warm_up_model() == "captured"
    assert seen["during"] == {"full_graph_bytes": [5 * mib, 1 * mib, 0]}
    assert torch.cuda.graph is Graph
