"""Generate docs/api.md from packlib's docstrings.

    python docs/gen_api.py          # rewrite docs/api.md
    python docs/gen_api.py --check  # exit 1 if docs/api.md is stale (the test suite runs this)
"""
from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTIONS = [
    ("Histogram packing", ["histogram", "spfhp_pack", "lpfhp_pack", "nnls_pack", "PackingPlan"]),
    ("Per-sequence packing", ["ffd_pack", "bfd_pack", "Packs"]),
    ("Any method by name", ["pack", "methods.names", "methods.get", "methods.Method"]),
    ("Near-optimal packing", ["optimal_pack", "lower_bound", "LowerBound", "Certificate"]),
    ("Comparison", ["compare", "ComparisonTable"]),
    ("Blended-dataset indices", ["blend", "blend_exhaustive", "BlendedIndex"]),
    ("Bucketing and streaming", ["BucketedReadaheadBatchIterator", "bucket", "pack_stream"]),
    ("Compute-balanced steps", ["balance", "round_robin", "fit_cost", "transformer_cost", "vision_cost", "Schedule",
                                "BalancedBatchSampler"]),
    ("Context-parallel steps", ["plan_cp_step", "CPStep"]),
    ("Utilities", ["warmup", "datasets.wikipedia_512", "datasets.load_histogram"]),
    ("Plots (extra `plot`)", ["plot.histogram", "plot.plan", "plot.strategies", "plot.compare", "plot.schedule"]),
]
# adapters are documented module by module
MODULES = ["packlib.formats", "packlib.pipeline", "packlib.torch"]


def resolve(name):
    import packlib

    obj = packlib
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def signature(obj, name):
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    return f"{name}{sig}"


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)[.!?](?=\s|$)")


def summary(obj) -> str:
    """The first sentence of ``obj``'s docstring (its first paragraph read as one line, cut
    at the first full stop outside double backticks), never cut mid-sentence."""
    paragraph = " ".join((inspect.getdoc(obj) or "").split("\n\n")[0].split())
    code = False
    for k, part in enumerate(paragraph.split("``")):
        code = k % 2 == 1
        if code:
            continue
        end = _SENTENCE_END.search(part)
        if end:
            return "``".join(paragraph.split("``")[:k] + [part[:end.end()]])
    return paragraph


def render_object(name, obj, level="###"):
    kind = "class" if inspect.isclass(obj) else "function"
    out = [f"{level} `packlib.{name}`", "", "```python", f"{kind} {signature(obj, name.split('.')[-1])}", "```", ""]
    doc = inspect.getdoc(obj) or "(no docstring)"
    out += ["```text", doc, "```", ""]
    if inspect.isclass(obj):
        members = []
        for attr, value in sorted(vars(obj).items()):
            if attr.startswith("_"):
                continue
            if isinstance(value, property):
                first = summary(value)
                members.append(f"- `{attr}` (property){': ' + first if first else ''}")
            elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
                fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                first = summary(fn)
                members.append(f"- `{signature(fn, attr)}`{': ' + first if first else ''}")
        if members:
            out += ["Members:", ""] + members + [""]
    return out


def render():
    lines = ["# API reference", "", "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand.", ""]
    for title, names in SECTIONS:
        rendered = []
        for name in names:
            try:
                obj = resolve(name)
            except (AttributeError, ImportError):
                continue
            rendered += render_object(name, obj)
        if rendered:
            lines += [f"## {title}", ""] + rendered
    for modname in MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        lines += [f"## `{modname}`", "", inspect.getdoc(mod) or "", ""]
        names = getattr(mod, "__all__", [])
        for name in names:
            obj = getattr(mod, name, None)
            if obj is None or inspect.ismodule(obj):
                continue
            lines += render_object(f"{modname.split('.', 1)[1]}.{name}", obj, level="###")
        for sub in getattr(mod, "__submodules__", []):
            submod = importlib.import_module(f"{modname}.{sub}")
            lines += [f"### `{modname}.{sub}`", "", inspect.getdoc(submod) or "", ""]
            for name in getattr(submod, "__all__", []):
                lines += render_object(f"{modname.split('.', 1)[1]}.{sub}.{name}", getattr(submod, name), level="####")
    return "\n".join(lines).rstrip() + "\n"


def main():
    path = ROOT / "docs" / "api.md"
    text = render()
    if "--check" in sys.argv:
        if not path.exists() or path.read_text() != text:
            print("docs/api.md is stale: run python docs/gen_api.py")
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
