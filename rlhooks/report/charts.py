"""PNG charts from one or several runs (matplotlib, Agg backend, no display needed).

A chart is a set of panels; a panel plots the series whose names match a pattern. The label
group of the pattern (a source name, a function name) picks the colour; runs differ by line
style, so several runs overlay on one panel. A panel no run logged is left out; a chart with no
panel left is skipped with a note saying which metrics were missing.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import attrs
import numpy as np

from rlhooks.core.metrics import split_source_key
from rlhooks.core.rundir import write_atomic
from rlhooks.palette import run_colour, series_colours
from rlhooks.report.reader import RunData

LINESTYLES = ("-", "--", ":", "-.")


@attrs.frozen
class Panel:
    title: str
    pattern: str  # regex over metric names; group "label" names the series (optional)
    ylabel: str = ""
    stacked: bool = False  # stacked area (single run only)
    smooth: int = 1  # moving-average window
    #: a per-source panel: every ``source/<name>/<this>`` key, labelled by its (any) source name
    source_metric: str | None = None
    #: the title when no run drawn is a simulated one (e.g. verl's real ``actor/*`` values); None: ``title``
    real_title: str | None = None

    def title_for(self, simulated: bool) -> str:
        return self.title if simulated or self.real_title is None else self.real_title

    def matches(self, run: RunData) -> list[tuple[str, str]]:
        """(label, key) of the series this panel draws for ``run``, sorted by label."""
        out = []
        if self.source_metric is not None:
            for key in run.series:
                split = split_source_key(key)
                if split is not None and split[1] == self.source_metric:
                    out.append((split[0], key))
            return sorted(out)
        rx = re.compile(self.pattern)
        for key in run.series:
            m = rx.fullmatch(key)
            if m:
                label = m.groupdict().get("label") or key
                out.append((label, key))
        return sorted(out)


@attrs.frozen
class Chart:
    file: str
    title: str
    panels: tuple[Panel, ...]
    missing_note: str  # what it means when nothing was logged
    #: the title when no run drawn is a simulated one; None: ``title``
    real_title: str | None = None

    def title_for(self, runs: list[RunData]) -> str:
        return self.title if any_simulated(runs) or self.real_title is None else self.real_title


def any_simulated(runs: list[RunData]) -> bool:
    """Whether a run is the simulator's (its ``sim/*`` metrics): titles that say "simulated" are true only then."""
    return any(key.startswith("sim/") for run in runs for key in run.series)


CHARTS: tuple[Chart, ...] = (
    Chart("overview.png", "Overview", (
        Panel("accuracy per source (simulated learner)", r"sim/accuracy/(?P<label>(?!mean$).+)", "expected accuracy"),
        Panel("reward per source (trained rows)", r"source/<name>/reward", "mean reward", smooth=3, source_metric="reward"),
        Panel("curriculum percentile", r"curriculum/percentile", "% of items unlocked"),
        Panel("filter kept ratio", r"filter/kept_ratio", "kept / generated groups"),
        # verl's validation (a real learner's curve: trainer.test_freq steps apart)
        Panel("validation accuracy per source (verl)", r"val-core/(?P<label>.+)/acc/mean@\d+", "accuracy"),
    ), "no accuracy, source, curriculum, filter or validation metrics"),
    Chart("batch_composition.png", "Batch composition per source", (
        Panel("trained rows per source", r"source/<name>/count", "trajectories", stacked=True, smooth=5, source_metric="count"),
        Panel("generated rows per source", r"source/<name>/generated_count", "trajectories", stacked=True, smooth=5, source_metric="generated_count"),
    ), "no source/<name>/count metrics (enable source_metrics in rewards:)"),
    Chart("reward_per_source.png", "Reward per source", (
        Panel("trained rows", r"source/<name>/reward", "mean reward", smooth=3, source_metric="reward"),
        Panel("all generated rows (before filters)", r"source/<name>/generated_reward", "mean reward", smooth=3, source_metric="generated_reward"),
        Panel("accuracy of generated rows", r"source/<name>/generated_acc", "acc", smooth=3, source_metric="generated_acc"),
    ), "no source/<name>/reward metrics (enable source_metrics in rewards:)"),
    Chart("sampler_weights.png", "Sampler weights", (
        Panel("sampling weight per source", r"sampler/weight/(?P<label>.+)", "weight"),
        Panel("reward EMA per source", r"sampler/reward_ema/(?P<label>.+)", "reward EMA"),
    ), "no sampler/weight/<source> metrics (no multi-source sampler configured)"),
    Chart("curriculum.png", "Curriculum", (
        Panel("level", r"curriculum/level", "level"),
        Panel("percentile", r"curriculum/percentile", "% of items"),
        Panel("items unlocked", r"curriculum/num_items", "items"),
    ), "no curriculum/* metrics (no curriculum sampler configured)"),
    Chart("filter.png", "Dynamic sampling filter", (
        Panel("kept ratio", r"filter/kept_ratio", "kept / generated groups"),
        Panel("generation batches per step", r"train/num_gen_batches", "batches"),
        Panel("dropped groups", r"filter/(?P<label>dropped_[a-z_]+)", "groups"),
    ), "no filter/* or train/num_gen_batches metrics (no filter configured)"),
    Chart("reward_quality.png", "Reward quality indicators", (
        Panel("signal to noise", r"rewards/signal_to_noise", "|mean| / std"),
        Panel("entropy", r"rewards/entropy", "entropy"),
        Panel("variance", r"rewards/variance", "variance"),
        Panel("mean reward", r"rewards/mean", "reward"),
    ), "no rewards/* quality metrics (enable reward_monitor in rewards:)"),
    Chart("reward_functions.png", "Reward functions", (
        Panel("mean score per function", r"rewards/functions/(?P<label>[^/]+?)(?<!_std)", "score"),
        Panel("contribution to the total", r"contributions/(?P<label>[^/]+)", "%"),
    ), "no rewards/functions/* metrics (enable reward_monitor in rewards:)"),
    # on a real run (verl) the actor/* panels are verl's own values, and the chart says so
    Chart("learner.png", "Simulated learner", (
        Panel("mean skill per source", r"sim/skill/(?P<label>.+)", "skill"),
        Panel("malformed-response rate", r"sim/malformed_rate/(?P<label>.+)", "rate"),
        Panel("KL to the reference (simulated)", r"actor/kl_loss", "kl", real_title="KL to the reference (actor/kl_loss)"),
        Panel("update KL (simulated)", r"actor/ppo_kl", "kl", real_title="update KL (actor/ppo_kl)"),
        Panel("policy entropy (simulated)", r"actor/entropy", "entropy", real_title="policy entropy (actor/entropy)"),
    ), "no sim/* or actor/* metrics", real_title="Policy updates (verl's actor)"),
    # asynchronous training (verl's colocate/separate async, simulate.async_lag): how old the trained
    # trajectories were and what was evicted as too stale; a sync run logs none of it
    Chart("staleness.png", "Asynchronous training: lag and stale evictions", (
        Panel("lag of the trained trajectories", r"staleness/(?P<label>lag_mean|lag_max)", "policy updates"),
        Panel("groups evicted as too stale", r"staleness/evicted_groups", "groups"),
    ), "no staleness/* metrics (a synchronous run)"),
)

#: a series of at most this many points is drawn with markers: a run's only validation point (one step of
#: val-core/*) is invisible as a line, and a few points trainer.test_freq apart are where the values are
MARKER_POINTS = 30


def _step_ticks():
    """Ticks at whole steps (matplotlib imported on use, as the rest of this module)."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def whole_step_limits(lo: float, hi: float) -> tuple[float, float]:
    """The x range of a panel: at least one step either side of its middle, so a lone step (matplotlib's
    1.9-2.1 around it) gets whole-step ticks too."""
    if hi - lo >= 2:
        return lo, hi
    middle = (lo + hi) / 2
    return middle - 1, middle + 1


def line_marker(steps: np.ndarray) -> str | None:
    """The marker of a line over ``steps`` (None: a plain line)."""
    return "o" if len(steps) <= MARKER_POINTS else None


def _smooth(y: np.ndarray, w: int) -> np.ndarray:
    if w <= 1 or len(y) < w:
        return y
    finite = np.isfinite(y)
    yy = np.where(finite, y, 0.0)
    k = np.ones(w)
    num = np.convolve(yy, k, mode="full")[: len(y)]
    den = np.convolve(finite.astype(float), k, mode="full")[: len(y)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def render_chart(chart: Chart, runs: list[RunData], out_dir: Path) -> Path | None:
    """Draw ``chart`` for ``runs`` into out_dir/chart.file; None when no run has any of its metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(p, [(run, p.matches(run)) for run in runs]) for p in chart.panels]
    panels = [(p, per_run) for p, per_run in panels if any(m for _, m in per_run)]
    if not panels:
        return None
    ncols = 2 if len(panels) > 1 else 1
    nrows = (len(panels) + ncols - 1) // ncols
    # constrained layout keeps the legends below the axes (off the data) inside the figure
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 3.9 * nrows), squeeze=False, layout="constrained")
    # colours go to named series only (sources, functions), so a source has the same colour in every
    # chart, here and in the dashboard (rlhooks.palette); a panel's single unnamed series (actor/entropy,
    # ...) is coloured by its run instead
    colour = series_colours(lab for _, per_run in panels for _, m in per_run for lab, k in m if lab != k)
    multi = len(runs) > 1
    simulated = any_simulated(runs)
    for ax, (panel, per_run) in zip(axes.ravel(), panels):
        if panel.stacked and not multi:
            run, matches = per_run[0]
            if matches:
                steps = np.unique(np.concatenate([run.series[k][0] for _, k in matches]))
                ys = []
                for _, k in matches:
                    s, v = run.series[k]
                    y = np.zeros(len(steps))
                    y[np.searchsorted(steps, s)] = np.nan_to_num(v)
                    ys.append(y)
                ax.stackplot(steps, ys, labels=[lab for lab, _ in matches], colors=[colour.get(lab, run_colour(i)) for i, (lab, _) in enumerate(matches)], alpha=0.85)
        else:
            for r, (run, matches) in enumerate(per_run):
                for lab, k in matches:
                    s, v = run.series[k]
                    single = len(matches) == 1 and lab == k
                    col = run_colour(r) if single else colour.get(lab, run_colour(r))
                    name = run.name if single else (f"{run.name} · {lab}" if multi else lab)
                    ax.plot(s, _smooth(v, panel.smooth), LINESTYLES[r % len(LINESTYLES)] if not single else "-",
                            color=col, label=name, linewidth=1.6, marker=line_marker(s), markersize=4)
        smoothed = panel.smooth > 1 and not (panel.stacked and not multi)
        ax.set_title(panel.title_for(simulated) + (f" (moving avg {panel.smooth})" if smoothed else ""), fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.set_xlim(*whole_step_limits(*ax.get_xlim()))
        ax.xaxis.set_major_locator(_step_ticks())  # steps are whole: no "1.975" ticks around a lone point
        if panel.ylabel:
            ax.set_ylabel(panel.ylabel, fontsize=9)
        ax.grid(alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles and (len(handles) > 1 or multi):
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False,
                      ncol=min(len(handles), 4))
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    title = chart.title_for(runs) + (" — " + " vs ".join(r.name for r in runs) if multi else f" — {runs[0].name}")
    fig.suptitle(title, fontsize=12)
    out = out_dir / chart.file
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    write_atomic(out, buf.getvalue())  # never a cut PNG
    return out
