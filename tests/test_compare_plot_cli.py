import json
import sys

import numpy as np
import pytest

import packlib
from packlib import cli

SMALL = np.bincount(np.random.default_rng(0).integers(1, 65, 3000), minlength=65)[1:]


def test_compare_table():
    table = packlib.compare(SMALL, methods=["spfhp", "lpfhp", "nnls"], max_sequences_per_pack=(2, None))
    assert [(r.method, r.depth) for r in table] == [
        (m, d) for d in (2, None) for m in ("spfhp", "lpfhp", "nnls")
    ]
    for r in table:
        plan = getattr(packlib, f"{r.method}_pack")(SMALL, r.depth)
        assert r.packs == plan.num_packs and r.efficiency == pytest.approx(plan.efficiency)
        assert r.seconds >= 0
    md = table.to_markdown()
    assert md.splitlines()[0].startswith("| method") and len(md.splitlines()) == 2 + len(table)
    assert "<table>" in table._repr_html_()
    assert table.best().packs == min(r.packs for r in table)
    assert table.to_records()[0]["method"] == "spfhp"
    pd = pytest.importorskip("pandas")
    assert isinstance(table.to_pandas(), pd.DataFrame)


def test_compare_rejects_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'ffd'; choose from spfhp, lpfhp, nnls"):
        packlib.compare(SMALL, methods=["ffd"])


def test_html_reprs():
    plan = packlib.lpfhp_pack(SMALL)
    assert "efficiency" in plan._repr_html_() and "<table>" in plan._repr_html_()
    lengths = np.repeat(np.arange(1, 65), SMALL)
    assert "first packs" in plan.assign(lengths)._repr_html_()


def test_plots_render_to_png(tmp_path):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from packlib import plot

    plan = packlib.nnls_pack(SMALL)
    table = packlib.compare(SMALL, methods=["spfhp", "lpfhp"], max_sequences_per_pack=(3,))
    for name, draw in {
        "hist": lambda: plot.histogram(SMALL, log=True),
        "plan": lambda: plan.plot(),
        "strategies": lambda: plot.strategies(plan),
        "compare": lambda: plot.compare(table),
    }.items():
        ax = draw()
        assert ax.has_data()
        path = tmp_path / f"{name}.png"
        ax.figure.savefig(path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
        plt.close(ax.figure)


def test_plot_without_matplotlib_says_what_to_install(monkeypatch):
    from packlib import plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'packlib\[plot\]'"):
        plot.histogram(SMALL)


def test_cli_demo_on_a_histogram_file(tmp_path, capsys):
    path = tmp_path / "h.txt"
    path.write_text("\n".join(map(str, SMALL)) + "\n")
    assert cli.main(["demo", "--histogram", str(path), "--methods", "spfhp,lpfhp,nnls"]) == 0
    out = capsys.readouterr().out
    assert "| nnls" in out and "unlimited" in out and "every sample exactly once" in out
    np.save(tmp_path / "h.npy", SMALL)
    assert cli.main(["demo", "--histogram", str(tmp_path / "h.npy"), "--methods", "lpfhp", "--max-sequences-per-pack", "2"]) == 0


def test_cli_pack_writes_plan_json(tmp_path, capsys):
    path = tmp_path / "h.txt"
    path.write_text("\n".join(map(str, SMALL)))
    out = tmp_path / "plan.json"
    assert cli.main(["pack", "--histogram", str(path), "--method", "lpfhp", "-o", str(out)]) == 0
    plan = packlib.PackingPlan.from_dict(json.loads(out.read_text()))
    assert plan.num_packs == packlib.lpfhp_pack(SMALL).num_packs


def test_cli_reports_bad_input(tmp_path, capsys):
    path = tmp_path / "h.txt"
    path.write_text("1\n-2\n")
    assert cli.main(["demo", "--histogram", str(path)]) == 2
    assert "non-negative" in capsys.readouterr().err
    path.write_text("1\nabc\n")
    assert cli.main(["pack", "--histogram", str(path)]) == 2
    assert "h.txt:2" in capsys.readouterr().err
