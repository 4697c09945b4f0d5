import pathlib
import runpy
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_example_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(ROOT / "docs" / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "PackingPlan[nnlshp]" in out and "first pack:" in out


def test_api_reference_is_up_to_date():
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_api.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_readme_gives_the_two_quick_start_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "pip install . && python -m packlib demo" in readme
    assert 'pip install -e ".[test]" && python -m pytest' in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert '-e ".[test]"' in ci and "-m pytest" in ci
