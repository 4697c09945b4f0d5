"""Draw the README's chart from the figures the benchmarks measured.

    python benchmarks/plot_readme.py                      # docs/img/packlib-vs-peers.svg
    python benchmarks/plot_readme.py --output chart.png   # any format matplotlib writes

The figures come from ``benchmarks/results/readme_chart.json``: one panel per comparison, each
with the command that measured it, the machine and the date (docs/benchmarks.md holds the
tables they come from). Re-run that command, put its figures in the file, and run this
script to redraw the chart. Needs matplotlib (``pip install 'packlib[plot]'``).
"""
from __future__ import annotations

import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIGURES = ROOT / "benchmarks" / "results" / "readme_chart.json"
OUTPUT = ROOT / "docs" / "img" / "packlib-vs-peers.svg"
PACKLIB, PEER = "#1f77b4", "#b0b0b0"


def load(path=FIGURES) -> list[dict]:
    """The panels of the chart, each checked to have what the drawing and its caption need."""
    panels = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["panels"]
    for panel in panels:
        missing = {"title", "unit", "better", "format", "note", "bars", "command", "machine", "date"} - panel.keys()
        if missing:
            raise ValueError(f"{path}: panel {panel.get('title')!r} lacks {sorted(missing)}")
        if panel["better"] not in ("higher", "lower") or not panel["bars"]:
            raise ValueError(f"{path}: panel {panel['title']!r} needs bars and better='higher' or 'lower'")
    return panels


def draw(panels, output=OUTPUT):
    """One horizontal bar chart per panel, side by side: packlib's bar on top, coloured, and
    the panel's note (the measured difference) under its title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "packlib", "svg.fonttype": "none", "font.size": 9})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 2.6), layout="constrained")
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, panel in zip(axes, panels):
        bars = panel["bars"][::-1]  # barh draws bottom-up: packlib on top
        values = [b["value"] for b in bars]
        colors = [PEER] * (len(bars) - 1) + [PACKLIB]
        ax.barh(range(len(bars)), values, color=colors)
        ax.set_yticks(range(len(bars)), [b["label"] for b in bars])
        for y, v in enumerate(values):
            ax.text(v, y, " " + panel["format"].format(v), va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.2)
        ax.set_xlabel(f"{panel['unit']} ({panel['better']} is better)")
        ax.set_title(f"{panel['title']}\n{panel.get('subtitle', '')}", fontsize=9, pad=16)
        ax.text(0.5, 1.02, panel["note"], transform=ax.transAxes, ha="center", va="bottom",
                fontsize=9, fontweight="bold", color=PACKLIB)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    output = pathlib.Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"Date": None} if output.suffix == ".svg" else {}
    fig.savefig(output, metadata=metadata)
    plt.close(fig)
    return output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", default=str(FIGURES), help="the measured figures (JSON)")
    parser.add_argument("--output", default=str(OUTPUT), help="the image to write (.svg, .png, ...)")
    args = parser.parse_args(argv)
    panels = load(args.figures)
    path = draw(panels, args.output)
    print(f"wrote {path}")
    for panel in panels:
        print(f"  {panel['title']}: {panel['command']}  ({panel['machine']}, {panel['date']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
