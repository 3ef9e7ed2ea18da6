"""One colour per named series (a source, a reward function) in the report and the dashboard.

Both call ``series_colours`` with the labels a chart draws: labels are sorted and take the palette
in order, so a source has the same colour in every chart of both (the same sources, the same order).
The palette is matplotlib's tab10, as hex (Plotly and matplotlib both accept it).
"""

from __future__ import annotations

from collections.abc import Iterable

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def series_colours(labels: Iterable[str]) -> dict[str, str]:
    """label -> colour, by the label's place among the sorted distinct labels."""
    return {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(sorted(set(labels)))}


def run_colour(i: int) -> str:
    """Colour of the i-th run where a chart has one unnamed series per run."""
    return PALETTE[i % len(PALETTE)]
