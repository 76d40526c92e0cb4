"""The layout is the architecture: pure planner, components holding only ComponentResources, thin __main__."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def modules_loaded_by(imports: str) -> list[str]:
    """Every module a fresh interpreter has loaded after running `imports`."""
    code = f"{imports}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_the_planner_package_imports_no_pulumi_module():
    every = ("import pkgutil, planner\n"
             "for m in pkgutil.iter_modules(planner.__path__): __import__(f'planner.{m.name}')")
    loaded = [n for n in modules_loaded_by(every) if n.split(".")[0].startswith("pulumi")]
    assert loaded == [], f"planner pulled in {loaded}"


GPU_HOST_TOOLS = {"tools.pod_runner"}
"""Pure modules of tools/ the GPU benchmark runs there (no Pulumi on that host)."""
RENDERERS = {"bench/pods.py"}
"""bench/ files that run where Pulumi is installed (they render the program's objects for the GPU host)."""


@pytest.mark.parametrize("folder", ["bench", "policy", "images"])
def test_bench_policy_and_images_import_nothing_from_components_or_pulumi_programs(folder):
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "venv" in path.parts or str(path.relative_to(ROOT)) in RENDERERS:
            continue
        allowed = GPU_HOST_TOOLS if folder == "bench" else set()
        bad = {m for m in imported_modules(path) if m.split(".")[0] in ("components", "tools") and m not in allowed}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: only the planner package is shared"


def test_the_gpu_benchmark_imports_no_pulumi_module():
    loaded = [n for n in modules_loaded_by("import bench.run, bench.declared")
              if n.split(".")[0] in ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "components")]
    assert loaded == [], f"the GPU benchmark pulled in {loaded}"


def test_each_component_file_holds_one_component_resource_named_after_the_file():
    for path in sorted((ROOT / "components").glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        components = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
                      and any(ast.unparse(b) == "pulumi.ComponentResource" for b in n.bases)]
        expected = "".join(part.capitalize() for part in path.stem.split("_"))
        assert [c.lower() for c in components] == [expected.lower()], \
            f"{path.name} must hold exactly one ComponentResource named like the file, found {components}"


def test_main_is_the_dependency_graph_and_nothing_else():
    text = (ROOT / "__main__.py").read_text()
    assert len(text.splitlines()) <= 73  # imports + one statement per component (ComputeClass: issue 32; Router: 33)
    tree = ast.parse(text)
    arithmetic = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.BinOp)]
    assert not arithmetic, f"derived numbers belong on the planner's result: {arithmetic}"
    assert "pulumi.Config" not in text, "config and secrets are read once, by planner.config.from_pulumi"


@pytest.mark.parametrize("dockerfile", sorted((ROOT / "images").glob("*/Dockerfile")), ids=lambda p: p.parent.name)
def test_baked_images_run_as_the_uid_the_pods_declare(dockerfile):
    from planner.security import RUN_AS_UID

    users = [line.split()[1] for line in dockerfile.read_text().splitlines() if line.startswith("USER ")]
    assert users == [str(RUN_AS_UID)], f"{dockerfile.parent.name}: USER {users} but pods run as {RUN_AS_UID}"


def test_test_modules_have_unique_basenames():
    """pytest imports test modules by basename (no __init__.py here): two test_x.py in different tiers stop the whole
    run at collection ("import file mismatch"), which happened twice on fresh clones."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _marks(node: ast.expr) -> set[str]:
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    return {ast.unparse(item) for item in items}


RUNS_PODS = ("PodNetwork(", "Pod(", "'--pods'")
"""What a test's source holds when it runs pods: the runner's classes, or bench/run.py --pods."""


def test_every_test_that_runs_pods_is_marked_root():
    """Pods run through tools/pod_runner.py only as root; a non-root `make test` runs the tests marked `root` through
    sudo -n (tools/run_tests.sh), so an unmarked pod test would fail there with PermissionError."""
    unmarked, marked = [], 0
    for path in (ROOT / "tests").rglob("test_*.py"):
        if path == Path(__file__):
            continue
        tree = ast.parse(path.read_text())
        module_marks = set().union(*(_marks(n.value) for n in tree.body if isinstance(n, ast.Assign)
                                     and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks = module_marks.union(*(_marks(d) for d in node.decorator_list))
                if any(s in ast.unparse(node) for s in RUNS_PODS):
                    marked += "pytest.mark.root" in marks
                    if "pytest.mark.root" not in marks:
                        unmarked.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert unmarked == [], f"run pods but are not marked root: {unmarked}"
    assert marked >= 8, f"only {marked} pod tests found: the patterns in RUNS_PODS no longer match them"


def test_no_two_bench_modules_import_each_other():
    """bench/ is layered: the harness, then what uses it (layouts, levers, calibration), then the CLI; a module never
    imports one that imports it, directly or through others."""
    graph = {p.stem: {m.split(".")[1] for m in imported_modules(p) if m.startswith("bench.")}
             for p in (ROOT / "bench").glob("*.py")}
    graph = {name: deps & set(graph) for name, deps in graph.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(dep == goal or (dep not in seen and reaches(dep, goal, seen | {dep})) for dep in graph[start])

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert circles == [], f"bench modules in an import circle: {circles}"


def test_the_unit_and_program_tiers_import_without_torch_or_vllm():
    """The inner loop runs as the Pulumi program's environment is (requirements.txt: transformers without torch, no
    vLLM); checks held to vLLM's, torch's or a quantization library's own code live in tests/engine/. Every unit and
    program test module imports with both hidden as `make test-fast` hides them (tests/conftest.py)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if os.environ.get("TEST_PROGRAM_ENV") == "1":
        pytest.skip("this run hides torch and vLLM itself (make test-fast): every module here imported without them")
    root = Path(__file__).resolve().parents[2]
    modules = sorted(f"tests.{tier}.{p.stem}" for tier in ("unit", "program")
                     for p in (root / "tests" / tier).glob("test_*.py"))
    code = ("import importlib, sys\nsys.modules['torch'] = sys.modules['vllm'] = None\n"
            + "".join(f"importlib.import_module({m!r})\n" for m in modules))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _module_names(tree: ast.Module) -> set[str]:
    """Names a module binds to other modules: `import x [as y]`, and `from p import m` where p.m is a module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                try:
                    found = importlib.util.find_spec(f"{node.module}.{a.name}")
                except (ImportError, ValueError):
                    found = None
                if found is not None:
                    names.add(a.asname or a.name)
    return names


INSTRUMENTS = {("bench/peaktrace/sitecustomize.py", "torch.cuda.graph")}
"""The one replacement allowed: the site hook that instruments a vLLM server's own process for a GPU measurement
(bench/calibrate.py --sample-graphs) swaps torch.cuda.graph for a subclass that reads free memory around each FULL
capture, and puts it back when the warm-up returns."""


def test_no_module_looks_up_constants_in_globals_or_assigns_another_modules_names():
    """The program's and the benchmark's code reads constants as names and passes changed ones as arguments (the
    fitted constants are one frozen object, planner/memory_fit.py): no globals() lookup, and no assignment to an
    attribute of an imported module (the way bench/fit.py once overwrote sizing.PEAK_MARGIN_GIB while it searched)."""
    root = Path(__file__).resolve().parents[2]
    files = [root / "__main__.py", *(p for d in ("planner", "components", "tools", "bench")
                                     for p in sorted((root / d).rglob("*.py")))]
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        modules = _module_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals":
                found.append(f"{path.relative_to(root)}:{node.lineno} globals()")
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                base = target
                while isinstance(base, ast.Attribute):
                    base = base.value
                allowed = (path.relative_to(root).as_posix(), ast.unparse(target)) in INSTRUMENTS
                module_attribute = (isinstance(target, ast.Attribute) and isinstance(base, ast.Name)
                                    and base.id in modules)
                if module_attribute and not allowed:
                    found.append(f"{path.relative_to(root)}:{node.lineno} assigns {ast.unparse(target)}")
    assert len(files) > 40
    assert not found, found


def test_an_fp8_router_named_gate_in_the_scope_leaves_the_experts_quantized():
    """A block-FP8 MoE whose config lists its router ('gate') in modules_to_not_convert: vLLM's FP8 method matches
    names exactly, so the experts' gate_proj stays FP8; read as a substring it planned the experts in 16 bits
    (+91% weights, issue 42)."""
    import json
    from pathlib import Path

    from planner.model_config import parse_hf_config

    config = json.loads((Path(__file__).resolve().parents[2] / "models" / "DeepSeek-V3.json").read_text())
    listed = {**config, "quantization_config": {**config["quantization_config"],
                                                "modules_to_not_convert": ["gate", "lm_head"]}}
    plain = parse_hf_config(config, "d", "x")
    scoped = parse_hf_config(listed, "d", "x")
    assert dict(scoped.quantized_share)["experts"] == 1.0
    assert scoped.weight_bytes(2.0) == plain.weight_bytes(2.0)
