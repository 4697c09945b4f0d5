import json
import pathlib
import re
import runpy
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_example_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(ROOT / "docs" / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "PackingPlan[nnls]" in out and "first pack:" in out


def test_api_reference_is_up_to_date():
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_api.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


OPTIONAL = ["torch", "transformers", "pyarrow", "datasets", "ray", "h5py", "matplotlib", "tqdm", "pandas"]


def test_api_reference_does_not_depend_on_the_optional_packages():
    """The reference renders the same with every optional package unimportable (as on a fresh
    ``pip install .``) as with them installed (as in CI)."""
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in OPTIONAL)
    code = f"import runpy, sys; {block}; sys.argv = ['gen_api.py', '--check']; runpy.run_path({str(ROOT / 'docs' / 'gen_api.py')!r}, run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _quick_start_commands() -> list[str]:
    """The ```bash blocks of the README's Quick start, one command each."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_readme_gives_the_two_quick_start_commands():
    assert _quick_start_commands() == ["pip install . && python -m packlib demo",
                                       'pip install -e ".[test]" && python -m pytest']


def test_ci_runs_the_readme_test_command_verbatim_first_in_a_fresh_venv():
    """.ci/run's first install is the README's test command, as written, inside a virtual
    environment it has just made: what CI proves is what a newcomer runs."""
    command = _quick_start_commands()[1]
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    runs = [i for i, line in enumerate(lines) if line.startswith(command)]
    assert runs, f".ci/run does not run the README's test command {command!r}"
    before = lines[:runs[0]]
    assert any(line.startswith("python3 -m venv") for line in before), "no fresh virtual environment first"
    assert not any("pip install" in line or "pip_install" in line for line in before), \
        "something is installed before the README's command"


def _public_modules():
    """Public modules of packlib (no ``_`` in their path, except ``__init__``)."""
    pkg = ROOT / "packlib"
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg).parts
        if "__pycache__" in rel or p.name == "__main__.py":
            continue
        if any(part.startswith("_") and part != "__init__.py" for part in rel):
            continue
        yield p


def _doctest_examples(path) -> int:
    """``>>>`` examples in the module's docstrings (read with ast: no import, so modules of
    optional dependencies count too)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return sum((ast.get_docstring(n, clean=False) or "").count(">>> ") for n in nodes)


def test_every_public_module_shows_its_use_in_a_doctest():
    """``python -m pytest`` runs the doctests of the package (``--doctest-modules packlib``),
    so each example is checked; every public module has at least one."""
    without = [str(p.relative_to(ROOT)) for p in _public_modules() if _doctest_examples(p) == 0]
    assert not without, "public modules with no doctest example:\n" + "\n".join(without)
    assert sum(_doctest_examples(p) for p in _public_modules()) >= 10


def test_pytest_collects_the_package_doctests():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'testpaths = ["tests", "packlib"]' in pyproject
    assert 'addopts = "-ra --doctest-modules -n 2 --dist worksteal"' in pyproject
    assert 'empty_parameter_set_mark = "fail_at_collect"' in pyproject
    assert "--durations=15" in (ROOT / ".ci" / "run").read_text()


# ---------------------------------------------------------------------------------------------
# The README is short and shows a chart; its figures live in docs/benchmarks.md with commands.

README_WORDS = 1000
# figures the README carried before it was cut to a page: each must stay in docs/benchmarks.md
# (with its command there), so shortening the README drops no measurement
KEY_FIGURES = [
    "8,144,341", "8,143,830", "8,143,829", "8,135,727", "9,094,695", "49.97 %", "2.0013×", "8,155,057",
    "8,152,659", "19–21 s", "32 s", "37× / 40×", "14.6 s, 8,155,229 packs", "574,328", "100×",
    "1,143,639", "90,789", "685 s", "15–70×", "687,900", "37 are within 0.01 %", "0.03–1.5 s", "6.5–10.6 s",
    "26.2×", "30.4×", "28.8×", "16.5 s", "+0.709 %", "1.05×", "18–38×", "2.33×", "1.22×", "31 %",
    "30× faster", "34 s", "0.58", "2.4e-7", "2.4×", "2.9×", "3.1×", "0.99 balance", "0.93", "2.1×",
    "6–11", "0.993 / 0.990", "0.786 / 0.785", "0.28 s", "0.0013", "0.990", "0.823", "0.845",
    "2026-11-27", "0.977–0.991", "0.235–0.699", "up to 20×", "4 min 38 s to 5 min 21 s",
    "7 min 42 s to 8 min 53 s",
]


def _readme_words() -> int:
    return len((ROOT / "README.md").read_text(encoding="utf-8").split())


def test_the_readme_is_a_two_minute_read_with_a_chart():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _readme_words() <= README_WORDS, f"README.md has {_readme_words()} words (at most {README_WORDS})"
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert images and all((ROOT / path).is_file() for path in images), images
    assert "python benchmarks/plot_readme.py" in " ".join(readme.split()), "the command that redraws the chart"
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        if link != "docs/prefix-trees.md":  # written on another branch
            assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_every_measured_figure_has_its_place_in_docs_benchmarks():
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    flat = " ".join(page.split())
    missing = [figure for figure in KEY_FIGURES if figure not in flat]
    assert not missing, f"figures missing from docs/benchmarks.md: {missing}"
    recorded = json.loads((ROOT / "benchmarks" / "results" / "readme_chart.json").read_text(encoding="utf-8"))
    for panel in recorded["panels"]:  # the chart's figures: in a table of the page, with their command
        assert panel["command"] in flat, panel["command"]
        for bar in panel["bars"]:
            assert panel["format"].format(bar["value"]).replace(" s", "") in flat, (panel["title"], bar)


def test_the_chart_script_draws_the_recorded_figures(tmp_path):
    pytest.importorskip("matplotlib", reason="the chart is drawn with matplotlib: pip install 'packlib[plot]'")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plot_readme.py"), "--output", str(tmp_path / "c.svg")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    svg = (tmp_path / "c.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "packlib.balance" in svg and "TRL pack_dataset" in svg
