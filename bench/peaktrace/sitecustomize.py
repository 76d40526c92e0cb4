"""Where vLLM's profiled peak comes from: a record of every CUDA allocation while the worker profiles.

`bench/calibrate.py --trace-peak` puts this directory first on PYTHONPATH and sets VLLM_GKE_PEAK_TRACE to a folder.
Every Python process then imports this module at start (the site hook); in the one that imports vLLM's GPU worker,
`Worker.determine_available_memory` (the profile run whose `torch peak memory increase` the planner fits) runs under
torch's allocator history (torch.cuda.memory._record_memory_history). After it, the history is replayed: the
moment of the largest allocated total, and the blocks live then, each with the vLLM / generated-code frames that
allocated it, are written to VLLM_GKE_PEAK_TRACE/<model>.json, with what each Python garbage collection gave back
meanwhile (_Collections); and, split at a marker allocation when the runner's profile_run returns, the same for the
profile run alone ("profile_run": the peak vLLM logs, before the CUDA-graph estimate).
With VLLM_GKE_PEAK_TRACE_CAPTURE=1 (`--trace-capture`) `compile_or_warm_up_model` is
recorded too: the segments the CUDA-graph capture reserved and the graph pools it left, to <model>.capture.json.
With VLLM_GKE_PEAK_TRACE_GRAPHS=1 (`--trace-graphs`) only the V1 runner's CUDA-graph estimate
(GPUModelRunner.profile_cudagraph_memory) is recorded, each capture between marker allocations: what each capture
reserved and the allocation that needed it, to <model>.graphs.json.
With VLLM_GKE_GRAPH_SAMPLES=1 (`--sample-graphs`) nothing is recorded but the device memory each FULL CUDA graph
of Model Runner V2's capture took (free memory before and after its torch.cuda.graph, as vLLM 0.32.0's
profile_cudagraph_memory samples its largest two), to <model>.samples.json (_sample_full_graphs).
With VLLM_GKE_PEAK_TRACE_HOLDERS=1 each explicit gc.collect() of the profile also names what held the CUDA tensors
it freed (_Holders).
With VLLM_GKE_ROUTER_FAKE=1 (`--router-fake`) the worker's process registers vLLM 0.32.0's fake implementation of
the fused router kernel `_moe_C::grouped_topk` where the installed vLLM has none (0.25.1), so that the profile's
first router compile does not raise and keep its call stack, as in 0.32.0 (register_router_fake).
Nothing else changes; without VLLM_GKE_PEAK_TRACE or VLLM_GKE_ROUTER_FAKE this module does nothing.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import linecache
import os
import sys
from collections import defaultdict
from pathlib import Path

TARGET = "vllm.v1.worker.gpu_worker"
GIB = 1024**3
COLLECT = "collect"
"""The gc function _Holders wraps while the profile runs."""


def _kept(frame: dict) -> bool:
    name = frame.get("filename", "")
    return ("/vllm/" in name or "inductor" in name) and "/torch/" not in name


def _frames(frames: list[dict], depth: int = 8) -> list[str]:
    kept = [f for f in frames if _kept(f)][:depth]
    out = []
    for f in kept:
        line = linecache.getline(f["filename"], f["line"]).strip()
        out.append(f"{f['filename'].split('/vllm/')[-1]}:{f['line']} {f['name']} | {line[:160]}")
    return out


def _context(frames: list[dict]) -> list[str]:
    """Generated (inductor) code around the allocating line: its comments name the source nodes."""
    for f in frames:
        if "inductor" in f.get("filename", "") and "/torch/" not in f["filename"]:
            lines = [linecache.getline(f["filename"], n).rstrip() for n in range(f["line"] - 3, f["line"] + 8)]
            return [line[:200] for line in lines if line]
    return []


PROFILE_RUN_MARK_BYTES = 299_008
"""The size of the marker allocation made when the runner's profile_run returns (_marked_profile_run): a small-pool
block no other allocation of the profile has (MARK_BYTES' family is 512-byte multiples above it)."""


def profile_run_end(trace: list[dict]) -> int | None:
    """Where in the history the profile run ended: its marker allocation (_marked_profile_run), or None."""
    for i, event in enumerate(trace):
        if event["action"] == "alloc" and event["size"] == PROFILE_RUN_MARK_BYTES \
                and any(f.get("name") == "marked_profile_run" for f in event.get("frames", [])):
            return i
    return None


def summarize(snapshot: dict, device: int) -> dict:
    """The peak of the whole recorded call (_replay); where the profile run's marker is in the history, also the
    peak of the profile run alone, the one vLLM logs as `torch peak memory increase` (gpu_worker.py reads
    allocated_bytes.all.peak after profile_run, before the CUDA-graph estimate), under "profile_run"."""
    trace = snapshot["device_traces"][device]
    summary = _replay(trace)
    end = profile_run_end(trace)
    if end is not None:
        summary["profile_run"] = _replay(trace[:end])
    return summary


def _replay(trace: list[dict]) -> dict:
    current = peak = 0
    peak_at = -1
    for i, event in enumerate(trace):
        action = event["action"]
        if action == "alloc":
            current += event["size"]
        elif action == "free_completed":
            current -= event["size"]
        if current > peak:
            peak, peak_at = current, i
    at_peak: dict[int, tuple[int, int]] = {}
    requested: set[int] = set()
    for i, event in enumerate(trace[:peak_at + 1]):
        if event["action"] == "alloc":
            at_peak[event["addr"]] = (event["size"], i)
            requested.discard(event["addr"])
        elif event["action"] == "free_completed":
            at_peak.pop(event["addr"], None)
        elif event["action"] == "free_requested":
            requested.add(event["addr"])
    freed_after = {}
    for i, event in enumerate(trace[peak_at + 1:], peak_at + 1):
        if event["action"] == "free_completed" and event["addr"] in at_peak and event["addr"] not in freed_after:
            freed_after[event["addr"]] = i
    by_site: dict[str, int] = defaultdict(int)
    for size, i in at_peak.values():
        frames = _frames(trace[i].get("frames", []), 2)
        by_site[" <- ".join(frames) or "(no vllm frame)"] += size
    blocks = sorted(at_peak.values(), reverse=True)[:30]
    recent = [i for i in range(peak_at, -1, -1) if trace[i]["action"] == "alloc"][:12]
    return {
        "events": len(trace),
        "peak_gib": round(peak / GIB, 4),
        "peak_event": peak_at,
        "live_blocks": len(at_peak),
        "live_gib": round(sum(s for s, _ in at_peak.values()) / GIB, 4),
        "by_site_gib": {k: round(v / GIB, 4) for k, v in sorted(by_site.items(), key=lambda kv: -kv[1])[:25]},
        "free_requested_before_peak_gib": round(sum(at_peak[a][0] for a in requested if a in at_peak) / GIB, 4),
        "largest": [{"gib": round(s / GIB, 4), "event": i, "freed_at": freed_after.get(trace[i]["addr"]),
                     "frames": _frames(trace[i].get("frames", [])),
                     "context": _context(trace[i].get("frames", []))} for s, i in blocks],
        "last_allocs_before_peak": [{"gib": round(trace[i]["size"] / GIB, 4), "event": i,
                                     "frames": _frames(trace[i].get("frames", []), 3)} for i in recent],
    }


class _Collections:
    """Python's cyclic garbage collections while the profile runs, each with the CUDA memory it gave back: torch frees
    a tensor held only by a reference cycle (a frame kept by an exception's traceback, say) at the collection, not
    when its last use ends. With VLLM_GKE_PEAK_TRACE_SAVEALL=1 the collected objects are kept (gc.DEBUG_SAVEALL) and
    the frames among them are named, with the CUDA tensors their locals held; that changes the peak, so it is a
    separate run."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.events: list[dict] = []
        self.saveall = os.environ.get("VLLM_GKE_PEAK_TRACE_SAVEALL") == "1"
        self.kept: list = []
        self.frames: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.types: dict[str, int] = defaultdict(int)
        self._before = 0

    def __call__(self, phase: str, info: dict) -> None:
        allocated = self.torch.cuda.memory_allocated()
        if phase == "start":
            self._before = allocated
            return
        self.events.append({"generation": info.get("generation"), "collected": info.get("collected"),
                            "freed_gib": round((self._before - allocated) / GIB, 4)})
        if self.saveall:
            import gc
            for obj in gc.garbage:
                self.types[type(obj).__name__] += 1
                if type(obj).__name__ == "frame":
                    code = obj.f_code
                    key = f"{code.co_filename.split('/vllm/')[-1]}:{obj.f_lineno} {code.co_name}"
                    held = sum(v.numel() * v.element_size() for v in obj.f_locals.values()
                               if isinstance(v, self.torch.Tensor) and v.is_cuda)
                    self.frames[key][0] += 1
                    self.frames[key][1] += held
            self.kept.extend(gc.garbage)
            gc.garbage.clear()

    def start(self) -> None:
        import gc
        gc.callbacks.append(self)
        if self.saveall:
            gc.set_debug(gc.DEBUG_SAVEALL)

    def stop(self) -> dict:
        import gc
        gc.callbacks.remove(self)
        if self.saveall:
            gc.set_debug(0)
        self.kept.clear()
        freeing = [e for e in self.events if e["freed_gib"]]
        out = {"collections": len(self.events), "freeing": freeing[:40],
               "freed_gib": round(sum(e["freed_gib"] for e in self.events), 4)}
        if self.saveall:
            out["garbage_types"] = dict(sorted(self.types.items(), key=lambda kv: -kv[1])[:25])
            out["garbage_frames"] = {k: {"count": c, "cuda_gib": round(b / GIB, 4)} for k, (c, b) in
                                     sorted(self.frames.items(), key=lambda kv: -kv[1][1])[:40]}
        return out


def _where(code, line: int) -> str:
    """A code object's file (from site-packages on) and a line in it."""
    return f"{code.co_filename.split('/site-packages/')[-1]}:{line}"


def _describe(obj, child) -> str:
    """One step of a holding chain: what `obj` is and where in it `child` sits. Types are read with type(), not
    isinstance: isinstance on a dead weak proxy raises."""
    kind = type(obj)
    name = kind.__name__
    if name == "frame":
        names = [k for k, v in obj.f_locals.items() if v is child]
        return f"frame {_where(obj.f_code, obj.f_lineno)} {obj.f_code.co_name} {names}"
    if name == "traceback":
        return f"traceback {_where(obj.tb_frame.f_code, obj.tb_lineno)} {obj.tb_frame.f_code.co_name}"
    if issubclass(kind, dict):
        return f"dict {[str(k)[:60] for k, v in obj.items() if v is child][:4]}"
    if issubclass(kind, (list, tuple)):
        return f"{name}[{len(obj)}] at {[i for i, v in enumerate(obj) if v is child][:4]}"
    if issubclass(kind, BaseException):
        return f"exception {name}: {str(obj)[:160]}"
    if name in ("function", "method"):
        func = getattr(obj, "__func__", obj)
        return f"{name} {getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}"
    return f"{kind.__module__}.{kind.__qualname__}"


class _Holders:
    """Who holds the CUDA tensors that only a full collection frees: each explicit gc.collect() while the profile runs
    is made with gc.DEBUG_SAVEALL, and for every CUDA tensor of 16 MiB or more among the collected objects the chain
    of collected objects that referred to it is walked up (frames with the local names that held it, dicts with their
    keys, exceptions with their text). VLLM_GKE_PEAK_TRACE_HOLDERS=1; a diagnosis run of its own (the tensors live
    until the walk ends)."""

    def __init__(self, torch, min_bytes: int = 16 * 2**20, depth: int = 14) -> None:
        self.torch = torch
        self.min_bytes = min_bytes
        self.depth = depth
        self.calls: list[dict] = []
        self._collect = None

    def start(self) -> None:
        import gc
        self._collect = gc.collect
        setattr(gc, COLLECT, self.collect)  # the hook's patch, as _record patches the worker's methods

    def stop(self) -> list[dict]:
        import gc
        setattr(gc, COLLECT, self._collect)
        return self.calls

    def collect(self, generation: int = 2) -> int:
        import gc
        torch = self.torch
        before = torch.cuda.memory_allocated()
        gc.garbage.clear()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            found = self._collect(generation)
        finally:
            gc.set_debug(0)
        garbage = list(gc.garbage)
        gc.garbage.clear()
        try:
            record = self.walk(garbage)
        except Exception as exc:  # a diagnosis: never stop the profile
            record = {"error": repr(exc)}
        record["collected"] = found
        del garbage
        self._collect(generation)
        record["freed_gib"] = round((before - torch.cuda.memory_allocated()) / GIB, 4)
        self.calls.append(record)
        return found

    def walk(self, garbage: list) -> dict:
        import gc
        torch = self.torch
        ids = {id(o) for o in garbage}
        parents: dict[int, list] = defaultdict(list)
        for obj in garbage:
            for ref in gc.get_referents(obj):
                if id(ref) in ids:
                    parents[id(ref)].append(obj)
        storages: dict[int, int] = {}
        chains: dict[str, dict] = {}
        for obj in garbage:
            if not issubclass(type(obj), torch.Tensor):  # type(), not isinstance: a dead weak proxy raises
                continue
            try:  # a fake or functional tensor has no storage to read
                storage = obj.untyped_storage()
                size, pointer = storage.nbytes(), storage.data_ptr()
                if not obj.is_cuda:
                    continue
            except Exception:
                continue
            if size < self.min_bytes or pointer in storages:
                continue
            storages[pointer] = size
            steps, current, seen = [], obj, {id(obj)}
            for _ in range(self.depth):
                up = [p for p in parents.get(id(current), []) if id(p) not in seen]
                if not up:
                    break
                holder = next((p for p in up if type(p).__name__ in ("frame", "traceback")), up[0])
                steps.append(_describe(holder, current) + (f" (+{len(up) - 1} more)" if len(up) > 1 else ""))
                seen.add(id(holder))
                current = holder
            key = " <- ".join(steps)
            entry = chains.setdefault(key, {"tensors": 0, "gib": 0.0, "shapes": []})
            entry["tensors"] += 1
            entry["gib"] = round(entry["gib"] + size / GIB, 4)
            if len(entry["shapes"]) < 6:
                entry["shapes"].append([list(obj.shape), str(obj.dtype)])
        types_: dict[str, int] = defaultdict(int)
        exceptions = []
        for obj in garbage:
            types_[type(obj).__name__] += 1
            if issubclass(type(obj), BaseException) and len(exceptions) < 20:
                tb, where = obj.__traceback__, []
                while tb is not None:
                    where.append(_where(tb.tb_frame.f_code, tb.tb_lineno))
                    tb = tb.tb_next
                exceptions.append({"type": type(obj).__name__, "text": str(obj)[:300], "where": where[-8:]})
        return {"objects": len(garbage), "cuda_tensor_gib": round(sum(storages.values()) / GIB, 4),
                "chains": dict(sorted(chains.items(), key=lambda kv: -kv[1]["gib"])[:25]),
                "types": dict(sorted(types_.items(), key=lambda kv: -kv[1])[:25]), "exceptions": exceptions}


def summarize_capture(snapshot: dict, device: int) -> dict:
    """What the CUDA-graph capture kept: the segments it reserved (the pool vLLM's `Graph capturing finished ...
    took N GiB` measures), the sites that reserved them, the graph pools' segments as the capture left them, and the
    segments it reserved and left outside the graph pools (the default pool's cache), each with the code that reserved
    it and the last block placed in it."""
    trace = snapshot["device_traces"][device]
    reserved = 0
    by_site: dict[str, int] = defaultdict(int)
    for event in trace:
        if event["action"] == "segment_alloc":
            reserved += event["size"]
            by_site[" <- ".join(_frames(event.get("frames", []), 3)) or "(no vllm frame)"] += event["size"]
        elif event["action"] == "segment_free":
            reserved -= event["size"]
    allocs = sorted(((e["size"], i) for i, e in enumerate(trace) if e["action"] == "alloc"), reverse=True)[:20]
    pools = [seg for seg in snapshot["segments"] if seg.get("device") == device and tuple(seg.get("segment_pool_id",
                                                                                                 (0, 0))) != (0, 0)]
    in_pools = {seg.get("address") for seg in pools}
    open_segments: dict[int, int] = {}
    for i, event in enumerate(trace):
        if event["action"] == "segment_alloc":
            open_segments[event["addr"]] = i
        elif event["action"] == "segment_free":
            open_segments.pop(event["addr"], None)
    starts = sorted(addr for addr in open_segments if addr not in in_pools)
    reserving = [trace[open_segments[addr]] for addr in starts]
    blocks = [[0, None] for _ in starts]
    for event in trace:
        if event["action"] == "alloc" and starts:
            at = bisect.bisect_right(starts, event["addr"]) - 1
            if at >= 0 and event["addr"] < starts[at] + reserving[at]["size"]:
                blocks[at][0] += 1
                blocks[at][1] = event
    kept = sorted(({"gib": round(seg["size"] / GIB, 4), "blocks": count,
                    "reserved_by": _frames(seg.get("frames", []), 3),
                    "last_block": _frames(last.get("frames", []), 3) if last else []}
                   for seg, (count, last) in zip(reserving, blocks, strict=True)), key=lambda k: -k["gib"])
    return {
        "events": len(trace),
        "segments_reserved_gib": round(reserved / GIB, 4),
        "segment_sites_gib": {k: round(v / GIB, 4) for k, v in sorted(by_site.items(), key=lambda kv: -kv[1])[:20]},
        "largest_allocs": [{"gib": round(size / GIB, 4), "event": i, "frames": _frames(trace[i].get("frames", []), 5)}
                           for size, i in allocs],
        "pool_segments": len(pools),
        "pool_total_gib": round(sum(seg["total_size"] for seg in pools) / GIB, 4),
        "pool_allocated_gib": round(sum(seg["allocated_size"] for seg in pools) / GIB, 4),
        "pool_largest_segments_gib": sorted((round(seg["total_size"] / GIB, 4) for seg in pools), reverse=True)[:20],
        "kept_outside_pools_gib": round(sum(k["gib"] for k in kept), 4),
        "kept_outside_pools": kept[:12],
    }


MARK_BYTES = 300_032
"""The first marker allocation's size around each capture the V1 graph profile makes (a small-pool block, 512-byte
multiples apart: MARK_BYTES + 512 x k, k = 2 x call before it and 2 x call + 1 after)."""
CAPTURES: list[dict] = []
"""Each capture the V1 runner's profile_cudagraph_memory made: its mode, batch and the device memory it took."""


def _marked_captures(runner_cls, torch) -> None:
    """Wrap the V1 runner's _warmup_and_capture: a marker allocation before and after each call, and the call's mode,
    tokens and the free-memory drop it caused (what vLLM's estimate reads) in CAPTURES."""
    original = runner_cls._warmup_and_capture

    def marked(self, desc, *args, **kwargs):
        call = len(CAPTURES)
        torch.empty(MARK_BYTES + 512 * 2 * call, dtype=torch.uint8, device=self.device)
        torch.cuda.synchronize()
        free = torch.cuda.mem_get_info()[0]
        try:
            return original(self, desc, *args, **kwargs)
        finally:
            torch.cuda.synchronize()
            mode = kwargs.get("cudagraph_runtime_mode", args[0] if args else None)
            CAPTURES.append({"call": call, "mode": getattr(mode, "name", str(mode)),
                             "tokens": getattr(desc, "num_tokens", None),
                             "took_mib": round((free - torch.cuda.mem_get_info()[0]) / 2**20, 2)})
            torch.empty(MARK_BYTES + 512 * (2 * call + 1), dtype=torch.uint8, device=self.device)

    marked.__qualname__ = "peaktrace._warmup_and_capture"
    runner_cls._warmup_and_capture = marked


def summarize_graphs(snapshot: dict, device: int) -> dict:
    """What each capture of the V1 graph profile reserved: between its markers (_marked_captures), every segment it
    reserved with the allocation that needed it (size, code), and its allocations of 1 MiB or more in order."""
    trace = snapshot["device_traces"][device]
    marks = {}
    for i, event in enumerate(trace):
        if event["action"] != "alloc":
            continue
        k, rest = divmod(event["size"] - MARK_BYTES, 512)
        if not rest and 0 <= k < 2 * len(CAPTURES) and any(f.get("name") == "marked" for f in event.get("frames", [])):
            marks.setdefault(k, i)
    out = []
    for capture in CAPTURES:
        start, end = marks.get(2 * capture["call"]), marks.get(2 * capture["call"] + 1)
        entry = dict(capture)
        if start is None or end is None:
            entry["error"] = "markers not in the history"
            out.append(entry)
            continue
        events = trace[start + 1:end]
        segments = []
        for j, event in enumerate(events):
            if event["action"] == "segment_alloc":
                need = next((e for e in events[j + 1:] if e["action"] == "alloc"), None)
                segments.append({"mib": round(event["size"] / 2**20, 3),
                                 "for_mib": round(need["size"] / 2**20, 3) if need else None,
                                 "frames": _frames((need or event).get("frames", []), 5)})
        entry["segments_reserved_mib"] = round(sum(seg["mib"] for seg in segments), 3)
        entry["segments_freed_mib"] = round(sum(e["size"] for e in events if e["action"] == "segment_free") / 2**20, 3)
        entry["segments"] = segments[:40]
        entry["large_allocs"] = [{"mib": round(e["size"] / 2**20, 3), "frames": _frames(e.get("frames", []), 3)}
                                 for e in events if e["action"] == "alloc" and e["size"] >= 2**20][:80]
        out.append(entry)
    return {"events": len(trace), "captures": out}


def _record(worker, method: str, suffix: str, summarize_snapshot, torch, collections: bool) -> None:
    """Run Worker.<method> under torch's allocator history and write summarize_snapshot's reading of it to
    VLLM_GKE_PEAK_TRACE/<model><suffix>; with `collections`, also what the allocated total was before, its maximum,
    and the garbage collections meanwhile (_Collections)."""
    original = getattr(worker, method)

    def recorded(self):
        torch.cuda.memory._record_memory_history(max_entries=3_000_000, context="alloc", stacks="python")
        before = torch.cuda.memory_allocated()
        probe = _Collections(torch) if collections else None
        holders = _Holders(torch) if collections and os.environ.get("VLLM_GKE_PEAK_TRACE_HOLDERS") == "1" else None
        if probe:
            probe.start()
        if holders:
            holders.start()
        try:
            return original(self)
        finally:
            snapshot = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            holder_calls = holders.stop() if holders else None
            gc_summary = probe.stop() if probe else None
            out = Path(os.environ["VLLM_GKE_PEAK_TRACE"]) / f"{Path(str(self.model_config.model)).name}{suffix}"
            try:
                summary = summarize_snapshot(snapshot, torch.cuda.current_device())
                if probe:
                    summary["allocated_before_gib"] = round(before / GIB, 4)
                    summary["max_allocated_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 4)
                    summary["gc"] = gc_summary
                if holders:
                    summary["holders"] = holder_calls
            except Exception as exc:  # the trace is a diagnosis: a failure here must not stop the server
                summary = {"error": repr(exc)}
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(summary, indent=1))

    recorded.__qualname__ = f"peaktrace.{method}"
    setattr(worker, method, recorded)


FULL_GRAPH_CALLER = "v1/worker/gpu/cudagraph_utils.py"
"""The module whose torch.cuda.graph blocks are Model Runner V2's FULL graphs (CudaGraphManager.capture); the
PIECEWISE graphs are captured elsewhere (vLLM's CUDAGraphWrapper inside the compiled pieces)."""


def _sample_full_graphs(worker, torch) -> None:
    """Run Worker.compile_or_warm_up_model with torch.cuda.graph replaced by a subclass that, for the graphs
    CudaGraphManager.capture opens (FULL_GRAPH_CALLER), synchronizes and reads the device's free memory before and
    after the capture, and writes the drops so far, in capture order (the largest batch first), to
    VLLM_GKE_PEAK_TRACE/<model>.samples.json after each graph: bench/calibrate.py stops the server once the capture
    has logged, before the warm-up returns."""
    original = worker.compile_or_warm_up_model

    def sampled(gpu_worker):
        samples: list[int] = []
        base = torch.cuda.graph
        name = Path(str(gpu_worker.model_config.model)).name
        out = Path(os.environ["VLLM_GKE_PEAK_TRACE"]) / f"{name}.samples.json"
        out.parent.mkdir(parents=True, exist_ok=True)

        class Sampled(base):
            def __enter__(self):
                caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
                self.sampled = caller.endswith(FULL_GRAPH_CALLER)
                if self.sampled:
                    torch.cuda.synchronize()
                    self.free_before = torch.cuda.mem_get_info()[0]
                return super().__enter__()

            def __exit__(self, *exc):
                result = super().__exit__(*exc)
                if self.sampled:
                    torch.cuda.synchronize()
                    samples.append(self.free_before - torch.cuda.mem_get_info()[0])
                    out.write_text(json.dumps({"full_graph_bytes": samples}))
                return result

        torch.cuda.graph = Sampled
        try:
            return original(gpu_worker)
        finally:
            torch.cuda.graph = base

    sampled.__qualname__ = "peaktrace.compile_or_warm_up_model"
    worker.compile_or_warm_up_model = sampled


def _grouped_topk_fake(scores, num_expert_group: int, topk_group: int, topk: int, renormalize: bool,
                       routed_scaling_factor: float, bias, scoring_func: int = 0):
    """vLLM 0.32.0's fake of `_moe_C::grouped_topk` (vllm/_custom_ops.py _grouped_topk_fake): float32 weights and
    int32 expert ids, tokens x topk."""
    import torch

    tokens = scores.size(0)
    return (scores.new_empty((tokens, topk), dtype=torch.float32),
            scores.new_empty((tokens, topk), dtype=torch.int32))


def register_router_fake(torch, qualname: str = "_moe_C::grouped_topk") -> bool:
    """Register _grouped_topk_fake for `qualname` when the op exists and has no fake yet; whether it did."""
    namespace, name = qualname.split("::")
    if not hasattr(getattr(torch.ops, namespace), name):
        return False
    from torch._library.simple_registry import singleton

    if singleton.find(qualname).fake_impl.kernel is not None:  # vLLM 0.32.0 registers its own
        return False
    torch.library.register_fake(qualname)(_grouped_topk_fake)
    return True


def _marked_profile_run(runner_cls, torch) -> None:
    """Wrap the V1 runner's profile_run: a marker allocation (PROFILE_RUN_MARK_BYTES) when it returns, so that the
    replay can tell its peak from the CUDA-graph estimate's, which determine_available_memory runs after it."""
    original = runner_cls.profile_run

    def marked_profile_run(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            torch.empty(PROFILE_RUN_MARK_BYTES, dtype=torch.uint8, device=self.device)

    runner_cls.profile_run = marked_profile_run


def _wrap(module) -> None:
    import torch

    if os.environ.get("VLLM_GKE_ROUTER_FAKE") == "1":
        with contextlib.suppress(ImportError):
            importlib.import_module("vllm._moe_C")
        done = register_router_fake(torch)
        state = "registered" if done else "not registered (present already, or no such op)"
        print(f"peaktrace: fake for _moe_C::grouped_topk {state}", file=sys.stderr, flush=True)
    if not os.environ.get("VLLM_GKE_PEAK_TRACE"):
        return
    if os.environ.get("VLLM_GKE_GRAPH_SAMPLES") == "1":  # FULL-graph memory samples alone, no history
        _sample_full_graphs(module.Worker, torch)
        return
    if os.environ.get("VLLM_GKE_PEAK_TRACE_GRAPHS") == "1":  # the V1 graph profile alone (one history at a time)
        runner = importlib.import_module("vllm.v1.worker.gpu_model_runner").GPUModelRunner
        _marked_captures(runner, torch)
        _record(runner, "profile_cudagraph_memory", ".graphs.json", summarize_graphs, torch, False)
        return
    if os.environ.get("VLLM_GKE_PEAK_TRACE_CAPTURE") == "1":
        _record(module.Worker, "compile_or_warm_up_model", ".capture.json", summarize_capture, torch, False)
    with contextlib.suppress(ImportError, AttributeError):
        _marked_profile_run(importlib.import_module("vllm.v1.worker.gpu_model_runner").GPUModelRunner, torch)
    _record(module.Worker, "determine_available_memory", ".json", summarize, torch, True)


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def run(module):
            exec_module(module)
            _wrap(module)

        loader.exec_module = run
        return spec


if os.environ.get("VLLM_GKE_PEAK_TRACE") or os.environ.get("VLLM_GKE_ROUTER_FAKE") == "1":
    sys.meta_path.insert(0, _Hook())
