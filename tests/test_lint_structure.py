"""The house's structure, checked on the source (docs/design.md, "Floors"):

- imports only go down the floors, and no import closes a circle (read with ``ast``, lazy
  imports inside functions included);
- no function is longer than a screen (100 lines of code, its docstring aside);
- every public callable takes only its data, ``max_sequence_length`` and
  ``max_sequences_per_pack`` by position.
"""
import ast
import importlib
import inspect
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "packlib"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

# The floors, lowest first: a module may import modules of its own floor or below, never
# above. Names are relative to packlib ("" is packlib/__init__.py); a package stands for
# all its modules. docs/design.md draws the same picture.
FLOORS = [
    ("base", ["_version", "_hooks", "_jit", "_deprecation", "_validate", "_progress", "_names", "_nnls_limits",
              "_shared_compile", "_compat", "datasets", "plot"]),
    ("kernels", ["_kernels"]),
    ("results", ["_histogram", "_canonical", "_packs", "_plan", "_first_use"]),
    ("packers", ["packing", "_nnls_recipe", "optimal", "blending", "balancing", "context_parallel"]),
    ("registry", ["methods"]),
    ("users of the registry", ["bucketing", "_method_warmup", "comparison", "sampler"]),
    ("adapters", ["formats", "torch"]),
    ("pipeline", ["pipeline"]),
    ("entry points", ["_warmup", "_precompile", "cli", "__main__", ""]),
]
FUNCTION_LINES = 100


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in SOURCES}


def floor_of(module: str) -> int:
    """The floor of ``packlib.x.y``: that of the longest listed prefix."""
    rel = module[len("packlib."):] if module != "packlib" else ""
    best, found = -1, None
    for k, (_, names) in enumerate(FLOORS):
        for name in names:
            if rel == name or (name and rel.startswith(name + ".")):
                if len(name) > best:
                    best, found = len(name), k
    if found is None:
        raise AssertionError(f"{module} is on no floor: add it to FLOORS here and to docs/design.md")
    return found


def imports_of(path: pathlib.Path) -> dict[str, int]:
    """The packlib modules ``path`` imports (module -> line), lazy imports included.
    ``from pkg import sub`` imports the submodule ``pkg.sub``; ``from pkg import name``
    imports ``pkg``."""
    module = _module_name(path)
    is_pkg = path.name == "__init__.py"
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "packlib":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.setdefault(sub if sub in MODULES else target, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "packlib":
                    out.setdefault(alias.name, node.lineno)
    out.pop(module, None)
    return out


GRAPH = {m: imports_of(p) for m, p in MODULES.items()}


def upward_imports() -> list[str]:
    bad = []
    for module, targets in GRAPH.items():
        mine = floor_of(module)
        for target, line in targets.items():
            if floor_of(target) > mine:
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} ({FLOORS[mine][0]}) imports "
                           f"{target} ({FLOORS[floor_of(target)][0]})")
    return bad


def circles() -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in GRAPH.get(u, {}):
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v in GRAPH and not state.get(v):
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(GRAPH):
        if not state.get(m):
            visit(m)
    return found


def test_every_module_is_on_a_floor():
    for module in MODULES:
        floor_of(module)


def test_imports_only_go_down():
    assert upward_imports() == []


def test_no_import_closes_a_circle():
    assert circles() == []


def test_the_lint_sees_upward_imports_and_circles(monkeypatch):
    """The two checks above can fail: an adapter importing the pipeline is caught, and so
    is a registry/packer knot."""
    monkeypatch.setitem(GRAPH, "packlib.formats.arrow._table", {"packlib.pipeline": 1})
    assert any("packlib.formats.arrow._table (adapters) imports packlib.pipeline (pipeline)" in b
               for b in upward_imports())
    monkeypatch.setitem(GRAPH, "packlib.packing", {**GRAPH["packlib.packing"], "packlib.methods": 1})
    monkeypatch.setitem(GRAPH, "packlib.methods", {**GRAPH["packlib.methods"], "packlib.packing": 1})
    assert ["packlib.methods", "packlib.packing", "packlib.methods"] in circles() or \
        ["packlib.packing", "packlib.methods", "packlib.packing"] in circles()


def test_lazy_exports_and_the_registry_point_down():
    """The names ``packlib/__init__.py`` loads lazily, and the packers the registry names by
    string, live on lower floors than the module that names them."""
    import packlib
    from packlib import methods

    top = floor_of("packlib")
    for name, module in packlib._EXPORTS.items():
        assert floor_of(f"packlib.{module}") <= top, name
        assert hasattr(importlib.import_module(f"packlib.{module}"), name), name
    for name in methods.names():
        m = methods.get(name)
        assert floor_of(f"packlib.{m._module}") < floor_of("packlib.methods"), name


# ------------------------------------------------------------------------------ lengths


def function_lengths():
    """``(lines of code, where)`` of every function, its docstring aside."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                doc = 0
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    doc = body[0].end_lineno - body[0].lineno + 1
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                yield node.end_lineno - start + 1 - doc, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"


def test_no_function_is_longer_than_a_screen():
    long = sorted((n, where) for n, where in function_lengths() if n > FUNCTION_LINES)
    assert long == [], f"split these at their seams (at most {FUNCTION_LINES} lines of code each)"


def test_the_length_lint_counts_code_not_docstrings(tmp_path):
    assert max(n for n, _ in function_lengths()) > 20  # it reads real functions


# ------------------------------------------------------------------------------ positional

# The public modules whose callables follow the argument convention.
PUBLIC_MODULES = ["packlib", "packlib.methods", "packlib.datasets", "packlib.formats.arrow", "packlib.formats.varlen",
                  "packlib.formats.hdf5", "packlib.formats.tfrecord", "packlib.formats.example",
                  "packlib.formats.mlperf_bert", "packlib.pipeline", "packlib.pipeline.mlperf", "packlib.plot"]
CAPACITY, DEPTH = "max_sequence_length", "max_sequences_per_pack"
# a second capacity that may follow the first: MLPerf BERT's prediction slots per sequence
OTHER_CAPACITIES = {"max_predictions"}
# Options: never positional. (Data parameters are named for what they hold, so the rule is
# read as: after the data come only the capacity and the depth, and no option is positional.)
OPTIONS = {"method", "methods", "seed", "progress", "output", "output_dir", "overflow", "engine",
           "workers", "ray_address", "rows_per_file", "verify", "time_limit", "materialize", "shuffle",
           "batch_size", "max_tokens", "read_ahead", "position_ids", "seq_length", "key", "compression",
           "records_per_file", "prefix", "world_size", "rank", "micro_batches", "cost", "window", "epoch",
           "drop_last", "depths", "first_row", "chunk"}


def _public_callables():
    for modname in PUBLIC_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # pragma: no cover - an optional dependency is missing
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                yield f"{modname}.{name}", obj


def positional_problem(fn) -> str | None:
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    for k, name in enumerate(names):
        if name in OPTIONS:
            return f"option {name!r} can be passed by position"
        if name == DEPTH and k + 1 < len(names):
            return f"{names[k + 1]!r} comes after the depth"
        if name == CAPACITY and k + 1 < len(names) and names[k + 1] not in {DEPTH} | OTHER_CAPACITIES:
            return f"{names[k + 1]!r} comes after the capacity"
    return None


def test_public_callables_take_only_data_capacity_and_depth_by_position():
    found = dict(_public_callables())
    assert len(found) > 30, "the lint sees the public API"
    bad = {name: p for name, fn in found.items() if (p := positional_problem(fn))}
    assert bad == {}


def test_the_positional_lint_can_fail():
    def old_blend(weights, size, method="megatron", seed=0):
        """."""

    def after_depth(lengths, max_sequence_length, max_sequences_per_pack=None, extra=0):
        """."""

    assert "option 'method'" in positional_problem(old_blend)
    assert "after the depth" in positional_problem(after_depth)


def test_deprecated_positional_spellings_still_work():
    import warnings

    import packlib

    with pytest.warns(DeprecationWarning, match="blend"):
        old = packlib.blend([1, 2], 30, "shuffled", 4)
    assert (old.dataset_index == packlib.blend([1, 2], 30, method="shuffled", seed=4).dataset_index).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packlib.blend([1, 2], 30, method="shuffled", seed=4)


def test_public_classes_name_their_public_path():
    """``__module__`` of every public class is a public module that holds it (``packlib`` for
    the top-level names), so pickles and reprs never name a private room."""
    import sys

    bad = []
    for modname in PUBLIC_MODULES + ["packlib.torch", "packlib.formats.arrow", "packlib.pipeline"]:
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # pragma: no cover - an optional dependency is missing
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not inspect.isclass(obj):
                continue
            home = obj.__module__
            if any(part.startswith("_") for part in home.split(".")) or \
                    getattr(sys.modules.get(home) or importlib.import_module(home), obj.__qualname__, None) is not obj:
                bad.append(f"{modname}.{name}: __module__ = {home!r}")
            if modname == "packlib" and home != "packlib":
                bad.append(f"packlib.{name}: __module__ = {home!r}, not 'packlib'")
    assert bad == []
