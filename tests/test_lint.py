"""House rules checked on the source, as stumpy lints its own:

- numba: only ``packlib/_jit.py`` imports numba; kernels live in ``packlib/_kernels/`` and
  are decorated with ``_jit.jit`` (or ``_jit.jit_parallel``); every decorator of ``_jit``
  is used.
- numpydoc: every public function and public method documents exactly the parameters of
  its signature, in order (or defers with "As for :func:`x`").
- no timing figures in docstrings (they go stale; measured figures live in README.md,
  docs/ and benchmarks/).
- no stack frames and no source text: packlib integrates through explicit arguments and
  documented hooks, never by reading its callers' frames or a function's source.
- one compatibility module: every private name of transformers, TRL, Accelerate and torch
  that packlib reads lives in ``packlib/_compat.py``.
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "packlib"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
KERNEL_DIR = PACKAGE / "_kernels"
# the decorators packlib/_jit.py defines (its public functions but python_callable, the tests'
# way into private kernels)
JIT_DECORATORS = tuple(n.name for n in ast.parse((PACKAGE / "_jit.py").read_text()).body
                       if isinstance(n, ast.FunctionDef) and not n.name.startswith("_") and n.name != "python_callable")


def _rel(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), _rel(path))


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: pathlib.Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names."""
    if not node.level:
        return node.module or ""
    base = _module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


# ------------------------------------------------------------------------------ numba


def _numba_imports(path):
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "numba"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "numba":
            out.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
    return out


def test_only_jit_module_imports_numba():
    bad = [f"{_rel(p)}: {imp}" for p in SOURCES if p.name != "_jit.py" or p.parent != PACKAGE
           for imp in _numba_imports(p)]
    assert not bad, "only packlib/_jit.py may import numba:\n" + "\n".join(bad)


def test_no_jit_calls_outside_jit_module():
    """No ``numba.njit`` / ``numba.jit`` / ``njit(...)`` anywhere but ``_jit.py``, so every
    kernel gets the one policy."""
    bad = []
    for p in SOURCES:
        if p == PACKAGE / "_jit.py":
            continue
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Attribute) and node.attr in ("njit", "jit", "generated_jit", "vectorize") \
                    and isinstance(node.value, ast.Name) and node.value.id == "numba":
                bad.append(f"{_rel(p)}:{node.lineno}: numba.{node.attr}")
            elif isinstance(node, ast.Name) and node.id == "njit":
                bad.append(f"{_rel(p)}:{node.lineno}: njit")
    assert not bad, "\n".join(bad)


def _jit_users():
    """``{path: [names imported from packlib._jit]}``."""
    users = {}
    for p in SOURCES:
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.ImportFrom) and _resolve(p, node) == "packlib._jit":
                users.setdefault(p, []).extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and _resolve(p, node) == "packlib" and \
                    any(a.name == "_jit" for a in node.names):
                users.setdefault(p, []).append("_jit")
    return users


# what _jit offers code that compiles kernels without defining any (a first call's compile
# shared with a helper process: packlib/_first_use.py, packlib/_method_warmup.py; the kernels
# compiled into the package: packlib/_precompile.py)
JIT_TOOLS = {"compile_for", "is_compiled", "BUILT_DIR", "BUILDING_ENV"}


def test_kernels_live_in_the_kernels_package():
    """Compiled code is kept apart from the public API: only ``packlib/_kernels/`` uses
    ``packlib._jit`` to define kernels (elsewhere only its tools that compile existing ones)."""
    bad = [_rel(p) for p, names in _jit_users().items() if KERNEL_DIR not in p.parents and not set(names) <= JIT_TOOLS]
    assert not bad, "modules outside packlib/_kernels/ that define kernels (move them there):\n" + "\n".join(bad)


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute):
        return f"{_decorator_name(d.value)}.{d.attr}"
    if isinstance(d, ast.Name):
        return d.id
    return "?"


KERNEL_MODULES = sorted(p for p in KERNEL_DIR.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", KERNEL_MODULES, ids=lambda p: p.stem)
def test_kernel_module_decorates_with_the_house_jit(path):
    tree = _tree(path)
    if not any(isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)) for node in tree.body):
        return  # a table of constants the kernels share (fill_modes, splitmix): nothing to decorate
    imported = {a.asname or a.name: a.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and _resolve(path, node) == "packlib._jit" for a in node.names}
    assert imported, f"{_rel(path)} does not import its decorator from packlib._jit"
    allowed = {alias for alias, name in imported.items() if name in JIT_DECORATORS}
    allowed |= {f"{alias}.{d}" for alias, name in imported.items() if name == "_jit" for d in JIT_DECORATORS}
    kernels, bad = 0, []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            names = [_decorator_name(d) for d in node.decorator_list]
            if any(n in allowed for n in names):
                kernels += 1
            else:
                bad.append(f"{_rel(path)}:{node.name}: decorated with {names}")
    assert not bad, "\n".join(bad)
    assert kernels, f"{_rel(path)} defines no kernel"


def test_every_jit_decorator_is_used():
    used = {n for names in _jit_users().values() for n in names}
    for p in KERNEL_MODULES:  # ``_jit.jit_parallel`` spelled through the module
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_jit":
                used.add(node.attr)
    assert "jit" in JIT_DECORATORS
    unused = [d for d in JIT_DECORATORS if d not in used]
    assert not unused, f"packlib/_jit.py defines decorators no kernel uses (delete them): {unused}"


# ---------------------------------------------------------------------------- numpydoc

_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}\s*$", re.M)
_DEFER = re.compile(r"\bas for :(func|meth|class):", re.I)


def _sections(doc: str) -> dict[str, str]:
    """numpydoc sections of a cleaned docstring: ``{title: body}``."""
    heads = list(_SECTION.finditer(doc))
    return {m.group(1).strip(): doc[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
            for i, m in enumerate(heads)}


_PARAM_HEAD = re.compile(r"^\*{0,2}[A-Za-z_]\w*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*\s*(?:$|:)")


def parse_parameters(doc: str) -> tuple[list[str], list[str]] | None:
    """``(names, stray)`` from the "Parameters" (and "Other Parameters") sections, in order;
    None if there is no such section. ``a, b, c : int`` documents three names and ``*args``
    documents ``args``; ``stray`` holds the lines at parameter indentation that are not a
    parameter (prose that numpydoc would render as a parameter)."""
    sections = _sections(doc)
    bodies = [sections[s] for s in ("Parameters", "Other Parameters") if s in sections]
    if not bodies:
        return None
    names, stray = [], []
    for body in bodies:
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if not lines:
            continue
        indent = min(len(ln) - len(ln.lstrip()) for ln in lines)
        for ln in lines:
            if len(ln) - len(ln.lstrip()) != indent:
                continue  # a description line
            if not _PARAM_HEAD.match(ln.strip()):
                stray.append(ln.strip())
                continue
            head = ln.strip().split(":", 1)[0]
            names += [n.strip().lstrip("*") for n in head.split(",") if n.strip()]
    return names, stray


def documented_parameters(doc: str) -> list[str] | None:
    parsed = parse_parameters(doc)
    return None if parsed is None else parsed[0]


def signature_parameters(fn: ast.FunctionDef, method: bool) -> tuple[list[str], set[str]]:
    """``(names in order, names that may go undocumented)``: ``self``/``cls`` dropped;
    ``*args``/``**kwargs`` may be left out (e.g. a deprecated positional form)."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if method and names and not any(_decorator_name(d) == "staticmethod" for d in fn.decorator_list):
        names = names[1:]
    optional = set()
    if a.vararg:
        names.append(a.vararg.arg)
        optional.add(a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append(a.kwarg.arg)
        optional.add(a.kwarg.arg)
    return names, optional


def _public_modules():
    for p in SOURCES:
        rel = p.relative_to(PACKAGE).parts
        if p.name == "__main__.py" or any(part.startswith("_") and part != "__init__.py" for part in rel):
            continue
        yield p


def _exported(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _is_property(fn: ast.FunctionDef) -> bool:
    return any(_decorator_name(d).split(".")[-1] in ("property", "cached_property", "setter", "deleter")
               for d in fn.decorator_list)


def public_callables():
    """``(where, node, is_method, docstring)`` for every public function, public method of a
    public class, and documented constructor of a public class, of the public modules."""
    for p in _public_modules():
        tree = _tree(p)
        exported = _exported(tree)

        def public(name):
            return name in exported if exported is not None else not name.startswith("_")

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and public(node.name):
                yield f"{_rel(p)}:{node.name}", node, False, ast.get_docstring(node)
            elif isinstance(node, ast.ClassDef) and public(node.name):
                for item in node.body:
                    if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    if item.name == "__init__":
                        # numpydoc documents the constructor in the class docstring
                        yield f"{_rel(p)}:{node.name}", item, True, ast.get_docstring(node)
                    elif not item.name.startswith("_") and not _is_property(item):
                        yield f"{_rel(p)}:{node.name}.{item.name}", item, True, ast.get_docstring(item)


def missing_section(node, is_method, doc) -> str | None:
    """None if ``doc`` has a Parameters section, defers ("As for :func:`x`"), or ``node``
    takes no parameters; else what is missing."""
    params, optional = signature_parameters(node, is_method)
    if parse_parameters(doc or "") is not None or not [n for n in params if n not in optional]:
        return None
    if doc and _DEFER.search(doc):
        return None
    if node.name == "__init__":
        return None  # a class documents its constructor in its docstring when it wants to
    return f"no Parameters section for {params}" if doc else f"no docstring (parameters {params})"


def docstring_problem(node, is_method, doc) -> str | None:
    """What is wrong with the Parameters section of ``doc`` for ``node`` (None: nothing,
    or no such section)."""
    params, optional = signature_parameters(node, is_method)
    parsed = parse_parameters(doc or "")
    if parsed is None:
        return None
    documented, stray = parsed
    missing = [n for n in params if n not in documented and n not in optional]
    unknown = [n for n in documented if n not in params]
    problems = [missing and f"undocumented {missing}", unknown and f"not in the signature {unknown}",
                stray and f"prose at parameter indentation {stray}"]
    if not (missing or unknown):
        if [n for n in documented if n in params] != [n for n in params if n in documented]:
            problems.append(f"documented in the order {documented}, signature order {params}")
    return "; ".join(p for p in problems if p) or None


def test_docstring_parser_reads_numpydoc():
    doc = "Do it.\n\nParameters\n----------\nhistogram, max_sequences_per_pack : int\n    Text.\n    More : text.\n" \
          "*args\n    Legacy.\nflag : bool, default True\n\nReturns\n-------\nint\n"
    assert documented_parameters(doc) == ["histogram", "max_sequences_per_pack", "args", "flag"]
    assert documented_parameters("Nothing here.") is None
    fn = ast.parse("def f(self, a, *args, b=1, **kw): pass").body[0]
    assert signature_parameters(fn, True) == (["a", "args", "b", "kw"], {"args", "kw"})
    assert docstring_problem(fn, True, "Parameters\n----------\na\nb\n") is None
    assert docstring_problem(fn, True, "Parameters\n----------\nb\na\n").startswith("documented in the order")
    assert docstring_problem(fn, True, "Parameters\n----------\na\n") == "undocumented ['b']"
    assert missing_section(fn, True, "Parameters and return value as for :func:`g`.") is None
    assert missing_section(fn, True, "As for :meth:`Packs.take`.") is None
    assert missing_section(fn, True, "Does it.") == "no Parameters section for ['a', 'args', 'b', 'kw']"
    assert parse_parameters("Parameters\n----------\na : int\nSome prose, here.\n") == (["a"], ["Some prose, here."])


def test_parameter_sections_match_signatures():
    found = list(public_callables())
    assert len(found) > 50, "the scan no longer finds the public API"
    problems = [f"{where}: {problem}" for where, node, is_method, doc in found
                if (problem := docstring_problem(node, is_method, doc))]
    assert not problems, f"{len(problems)} Parameters sections do not match their signatures:\n" + "\n".join(problems)


def test_public_callables_with_parameters_document_them():
    problems = [f"{where}: {problem}" for where, node, is_method, doc in public_callables()
                if (problem := missing_section(node, is_method, doc))]
    assert not problems, (f"{len(problems)} public functions or methods take parameters but document none "
                          "(add a numpydoc Parameters section, or write 'As for :func:`x`'):\n" + "\n".join(problems))


# -------------------------------------------------------------------------- no timings

# a number followed by a time unit, a "× faster", or a throughput
_TIMING = re.compile(
    r"(?<![\w.])\d(?:[\d,.]*\d)?\s*(?:ms|µs|us|ns|s|sec|secs|seconds?|minutes?|min|h|hours?)\b(?!-)"
    r"|(?<![\w.])\d(?:[\d.]*\d)?\s*[×x]\s*(?:faster|slower|quicker)"
    r"|measured[^.]{0,20}?(?<![\w.])\d(?:[\d.]*\d)?[×x](?![\w])"  # a measured ratio: "measured 1.4x"
    r"|(?<![\w.])\d(?:[\d.]*\d)?[×x]\s*measured"
    r"|\b(?:faster|slower) than\b[^.]*\d"
    r"|(?<![\w.])\d[\d,.]*\s*(?:[kMG]\s*)?\w*/s\b"
    r"|seconds? (?:warm|cold|cached)",
    re.I,
)


def _docstrings(path):
    tree = _tree(path)
    mod = ast.get_docstring(tree, clean=False)
    if mod:
        yield "(module)", tree.body[0].lineno, mod
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.name, node.body[0].lineno, doc


def timing_figures(text: str) -> list[str]:
    return [m.group(0) for m in _TIMING.finditer(text)]


def test_timing_regex():
    for text in ("0.3 s", "12 ms", "~6 ns per sample", "40× faster", "2.5x faster", "100 M items/s", "(~30x measured)", "(measured 1.4x on this loop)",
                 "20 seconds", "1.2 seconds warm", "faster than infinibatch by 2"):
        assert timing_figures(text), text
    for text in ("2**53 samples", "max 3 per pack", "time_limit : float, seconds", "the 16,279,552 sequences",
                 "O(n log n)", "512 tokens", "at most 2 s-t paths", "uint32s", "int64s", "a 2x2 block", "(n x k)", "(> 20x the median)"):
        assert not timing_figures(text), text


def test_no_timing_figures_in_docstrings():
    bad = [f"{_rel(p)}:{line}:{name}: {figures}" for p in SOURCES for name, line, doc in _docstrings(p)
           if (figures := timing_figures(doc))]
    assert not bad, "timing figures in docstrings (move them to README.md, docs/ or benchmarks/):\n" + "\n".join(bad)


# ------------------------------------------------------------- explicit hooks, not frames
FRAME_READERS = ("_getframe", "inspect.stack", "currentframe", "getsource", "f_back", "f_locals", "getouterframes")


def test_no_stack_frames_or_source_text():
    """What a sampler, collator or trainer does is decided by what it is told (arguments,
    ``drawn_by``, documented hooks), never by its caller's frames or a function's source."""
    bad = [f"{_rel(p)}:{i}: {line.strip()}" for p in SOURCES
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if any(w in line for w in FRAME_READERS)]
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------- one compatibility module
COMPAT = PACKAGE / "_compat.py"
HOSTS = ("transformers", "trl", "accelerate", "torch")
# objects of the host libraries whose private attributes a module might read
HOST_OBJECTS = ("trainer", "accelerator", "model", "config", "args", "state", "partial", "super()", "module")


def _host_private_reads(path):
    """``(line, what)`` of every private name of a host library that ``path`` reads: a
    private attribute of a host object, a private module of a host, a private name in a
    ``getattr`` string, or a private host method that :mod:`packlib._compat` names."""
    from packlib._compat import HOST_METHODS

    tree, out = _tree(path), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not node.attr.startswith("_packlib"):
            owner = ast.unparse(node.value)
            if owner.split(".")[-1] in HOST_OBJECTS or owner.split(".")[0] in HOSTS:
                out.append((node.lineno, f"{owner}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in HOSTS:
            private = [p for p in (node.module or "").split(".") if p.startswith("_")]
            private += [a.name for a in node.names if a.name.startswith("_")]
            if private or node.module in ("transformers.core_model_loading", "trl.trainer.utils"):
                out.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in set(HOST_METHODS.values()) | {"_tp_size", "_entropy_bonus_enabled",
                                                                 "_attn_implementation", "_shared_state"}:
            out.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.FunctionDef) and node.name in HOST_METHODS.values():
            out.append((node.lineno, f"def {node.name}"))
    return out


def test_host_private_names_live_in_the_compat_module():
    bad = [f"{_rel(p)}:{line}: {what}" for p in SOURCES if p != COMPAT for line, what in _host_private_reads(p)]
    assert not bad, "read these through packlib/_compat.py:\n" + "\n".join(bad)
    assert _host_private_reads(COMPAT)  # the check sees them where they are
