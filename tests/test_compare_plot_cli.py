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
        plan = getattr(packlib, f"{r.method}_pack")(SMALL, max_sequences_per_pack=r.depth)
        assert r.packs == plan.num_packs and r.efficiency == pytest.approx(plan.efficiency)
        assert r.seconds >= 0
    md = table.to_markdown()
    assert md.splitlines()[0].startswith("| method") and len(md.splitlines()) == 2 + len(table)
    assert "<table>" in table._repr_html_()
    assert table.best().packs == min(r.packs for r in table)
    assert table.to_records()[0]["method"] == "spfhp"


def test_compare_to_pandas():
    pd = pytest.importorskip("pandas")
    table = packlib.compare(SMALL, max_sequences_per_pack=3, methods="lpfhp")
    assert isinstance(table.to_pandas(), pd.DataFrame) and len(table.to_pandas()) == 1


def test_compare_rejects_unknown_method():
    with pytest.raises(ValueError, match="unknown histogram method 'ffd'; choose from spfhp, lpfhp, nnls, optimal"):
        packlib.compare(SMALL, methods=["ffd"])
    with pytest.raises(ValueError, match="unknown histogram method 'sp'"):
        packlib.compare(SMALL, methods="sp")


@pytest.mark.parametrize("method", packlib.methods.names("histogram"))
def test_every_plan_method_is_accepted_by_compare(method):
    plan = packlib.methods.get(method).function(SMALL, max_sequences_per_pack=3)
    assert plan.method == method
    row = packlib.compare(SMALL, max_sequences_per_pack=3, methods=[plan.method], warmup=False).best(depth=3)
    assert row.method == method and row.packs == plan.num_packs


# long-tailed lengths at L = 128: optimal_pack runs NNLSHP at depths 2 and 3
LOGNORMAL = np.bincount(
    np.clip(np.rint(np.random.default_rng(1).lognormal(np.log(40), 0.8, 3000)), 1, 128).astype(int) - 1, minlength=128
)


@pytest.mark.parametrize("depth", [2, 3, None, 128])
def test_optimal_takes_the_heuristics_plans_of_the_table(depth, monkeypatch):
    """compare() gives optimal the SPFHP / LPFHP / NNLSHP plans it already made: the same
    plan as optimal_pack alone, no heuristic run twice, and its time counts theirs."""
    from packlib.optimal import _solver

    runs = []
    for name, run in list(_solver._HEURISTICS.items()):
        monkeypatch.setitem(_solver._HEURISTICS, name, lambda *a, _n=name, _r=run: runs.append(_n) or _r(*a))
    alone = packlib.optimal_pack(LOGNORMAL, max_sequences_per_pack=depth)
    ran_alone, runs[:] = list(runs), []
    assert ("nnls" in ran_alone) == (depth in (2, 3))
    table = packlib.compare(LOGNORMAL, max_sequences_per_pack=depth, warmup=False)
    rows = {r.method: r for r in table}
    # none run again inside optimal; at a limit of L (no limit, but other arguments) it runs its own
    assert sorted(runs) == (sorted(ran_alone) if depth == 128 else [])
    taken = [] if depth == 128 else ran_alone
    assert (rows["optimal"].packs, rows["optimal"].lower_bound) == (alone.num_packs, alone.lower_bound)
    assert rows["optimal"].seconds >= sum(rows[name].seconds for name in taken)


def test_depths_in_threads_give_the_serial_table(monkeypatch):
    from packlib import comparison

    def table(cores):
        monkeypatch.setattr(comparison, "usable_cores", lambda: cores)
        rows = packlib.compare(LOGNORMAL, max_sequences_per_pack=(2, 3, None), warmup=False)
        return [(r.method, r.depth, r.packs, r.lower_bound, r.gap) for r in rows]

    serial = table(1)
    assert [d for _, d, *_ in serial] == [2] * 4 + [3] * 4 + [None] * 4
    assert table(3) == serial and table(2) == serial


def test_the_warm_up_reaches_the_optimal_packers_lp_at_every_depth_kind():
    """compare()'s warm-up times no compilation only if it runs what real inputs run: on its
    small inputs the heuristics miss the bound, at a depth limit and unlimited, so the LP is
    solved and rounded (else those kernels would compile inside the first row's time)."""
    from packlib.comparison import LP_WARMUPS

    assert sorted(d is None for _, d in LP_WARMUPS) == [False, True]
    for counts, depth in LP_WARMUPS:
        plan = packlib.optimal_pack(counts, max_sequences_per_pack=depth)
        assert "LP not needed" not in repr(plan.info["bound"])
        assert min(plan.info["heuristics"].values()) > plan.lower_bound and plan.info["source"] == "lp-rounding"


def test_compare_takes_one_depth_or_several():
    one = packlib.compare(SMALL, max_sequences_per_pack=3, methods="spfhp")
    assert [r.depth for r in one] == [3]
    both = packlib.compare(SMALL, max_sequences_per_pack=[3, None], methods="spfhp")
    assert [r.depth for r in both] == [3, None]
    with pytest.raises(ValueError, match="no rows at depth 5"):
        one.best(depth=5)
    with pytest.raises(TypeError, match="max_sequences_per_pack"):
        packlib.compare(SMALL, max_sequences_per_pack=2.5)


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


@pytest.mark.parametrize("counts, log", [(c, log) for c in ([0, 3, 0, 40, 1, 0], [5, 0, 2000, 7], [9]) for log in (False, True)]
                         + [([0, 0, 0], False)])
def test_histogram_bars_draw_what_stairs_draws(counts, log):
    """The bars are matplotlib's ``stairs``, added with their limits given (``stairs`` walks
    the outline in Python): the same pixels, on a linear and a log axis."""
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from packlib import plot

    images = []
    for draw in (plot._bars, lambda ax, c, **kw: ax.stairs(c, np.arange(0.5, len(c) + 1.0), fill=True, linewidth=0, **kw)):
        fig, ax = plt.subplots(figsize=(3, 2), dpi=50)
        draw(ax, np.array(counts), alpha=0.7, label="x")
        ax.set_yscale("log" if log else "linear")
        ax.legend()
        fig.canvas.draw()
        images.append(np.asarray(fig.canvas.buffer_rgba()).copy())
        plt.close(fig)
    assert np.array_equal(*images)


def test_plots_read_well_when_saved_plainly():
    """Every plot function returns one Axes; a new figure's labels stay inside it when saved
    without ``bbox_inches="tight"``; a plan's tokens-per-pack series shows at ~100 %
    efficiency and any L."""
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from packlib import plot

    h = np.zeros(8192, np.int64)
    h[[4095, 8191]] = [40, 7]  # halves and wholes: every pack exactly full
    full = packlib.lpfhp_pack(h, max_sequences_per_pack=None)
    assert full.efficiency == 1.0
    ax = plot.plan(full)
    lines = [c for c in ax.collections if c.get_label().startswith("tokens per pack")]
    assert lines and lines[0].get_linewidth()[0] >= 1.5
    assert [seg[0][0] for seg in lines[0].get_segments()] == [8192]
    plt.close(ax.figure)
    plan = packlib.nnls_pack(packlib.datasets.wikipedia_512())
    for ax in (plot.strategies(plan), plot.histogram(SMALL), plot.plan(plan)):
        assert isinstance(ax, mpl.axes.Axes)
        fig = ax.figure
        fig.canvas.draw()
        box, drawn = fig.bbox, ax.get_tightbbox(fig.canvas.get_renderer())  # every label drawn, ticks included
        assert box.x0 - 1 <= drawn.x0 and drawn.x1 <= box.x1 + 1 and box.y0 - 1 <= drawn.y0 and drawn.y1 <= box.y1 + 1
        plt.close(fig)


def test_plot_without_matplotlib_says_what_to_install(monkeypatch):
    from packlib import plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'packlib\[plot\]'"):
        plot.histogram(SMALL)


def test_the_table_plots_itself_in_a_notebook():
    """``packlib.compare(h).plot()``, what a notebook user types: one Axes, a bar per row at
    the row's efficiency, grouped by depth; ``ax=`` draws on the user's own Axes."""
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    table = packlib.compare(SMALL, methods=["spfhp", "lpfhp", "nnls"], max_sequences_per_pack=(2, None))
    ax = table.plot()
    assert isinstance(ax, mpl.axes.Axes) and ax.get_ylabel() == "efficiency (%)"
    bars = {(c.get_label(), round(p.get_x() + p.get_width() / 2 - k * 0.8 / 3)): p.get_height()
            for k, c in enumerate(ax.containers) for p in c.patches}
    expected = {(r.method, [2, None].index(r.depth)): 100 * r.efficiency for r in table}
    assert bars.keys() == expected.keys()
    assert all(bars[key] == pytest.approx(value) for key, value in expected.items())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["depth 2", "unlimited"]
    plt.close(ax.figure)
    fig, mine = plt.subplots()
    assert table.plot(ax=mine) is mine and mine.has_data()
    plt.close(fig)
    plan = packlib.nnls_pack(SMALL)
    ax = plan.plot()
    assert isinstance(ax, mpl.axes.Axes) and ax.has_data()
    plt.close(ax.figure)


def test_a_refused_row_has_no_bar_and_leaves_the_axis_readable():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from packlib.comparison import ComparisonRow, ComparisonTable

    table = ComparisonTable([ComparisonRow("spfhp", 3, 10, 0.9, 1.8, 2.0, 9, 1, 1e-3),
                             ComparisonRow("nnls", 3, None, float("nan"), float("nan"), 2.0, 9, None, 1e-3, "refused")])
    ax = table.plot()
    low, high = ax.get_ylim()
    assert np.isfinite([low, high]).all() and low <= 90 <= high
    plt.close(ax.figure)


@pytest.mark.parametrize("draw", ["table", "plan"])
def test_the_plot_methods_without_matplotlib_name_the_extra(monkeypatch, draw):
    table = packlib.compare(SMALL, methods="lpfhp", max_sequences_per_pack=3)
    plan = packlib.lpfhp_pack(SMALL)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'packlib\[plot\]'"):
        (table if draw == "table" else plan).plot()


def test_the_core_imports_no_matplotlib():
    """Comparing and planning import no plotting library; only a plot call does."""
    import subprocess

    code = ("import sys, packlib; table = packlib.compare([0, 2, 1, 1], methods='spfhp', warmup=False); "
            "table.best(); packlib.PackingPlan; assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


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
    path.write_text(f"1\n{2**64}\n")
    assert cli.main(["pack", "--histogram", str(path)]) == 2
    assert "outside [0, 2**63)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pack", "--histogram", "{tmp}/missing.txt"], "No such file or directory"),
        (["pack", "--histogram", "{tmp}/h.txt", "-o", "{tmp}/h.txt/plan.json"], "Not a directory"),
        (["pack", "--histogram", "{tmp}"], "Is a directory"),
        (["pack", "--histogram", "{tmp}/bad.npy"], "not a readable .npy"),
        (["pack", "--histogram", "{tmp}/empty.txt"], "no counts found"),
    ],
)
def test_cli_file_failures_are_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "h.txt").write_text("1\n2\n3\n")
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err and err.count("\n") == 1
    with pytest.raises(Exception):
        cli.main(["--debug"] + argv)


def test_cli_refuses_a_negative_seed(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--seed", "-1"])
    assert exc.value.code == 2 and "must be in [0, 2**64)" in capsys.readouterr().err


def test_compare_stops_an_optimal_row_at_its_time_limit_and_says_so():
    """``compare``'s ``time_limit`` reaches ``optimal_pack``: a row stopped with a gap left keeps
    its best plan (never more packs than NNLSHP's, which it starts from), the bound proven so
    far, and a note; without a limit the same row proves its plan and has no note."""
    h = packlib.datasets.wikipedia_512()
    stopped = packlib.compare(h, max_sequences_per_pack=3, methods=["nnls", "optimal"], time_limit=1e-6)
    nnls, optimal = stopped
    assert optimal.note == "stopped at time_limit=1e-06 s"
    assert optimal.lower_bound <= optimal.packs <= nnls.packs and optimal.gap > 0
    assert "note" in str(stopped)
    full = packlib.compare(h, max_sequences_per_pack=3, methods=["optimal"], time_limit=None)
    assert full[0].note == "" and full[0].gap < optimal.gap


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "5", True])
def test_compare_refuses_a_time_limit_that_is_not_seconds(bad):
    with pytest.raises(ValueError, match="time_limit must be"):
        packlib.compare([0, 2, 1, 1], methods=["optimal"], time_limit=bad)
