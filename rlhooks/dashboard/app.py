"""The Streamlit script behind ``rlhooks dashboard`` (run by ``streamlit run``; run dirs after ``--``).

Each panel is a ``st.container(key="panel-<name>")`` (CSS class ``st-key-panel-<name>``), so tests
and users' own CSS can find it. A small fragment re-runs every ``--refresh`` seconds: it tails the
runs' files and re-runs the page only when one of them grew (the sidebar's selections stay).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from rlhooks.dashboard.data import DashboardError, RunTail, label_runs
from rlhooks.palette import PALETTE, series_colours
from rlhooks.monitoring.alerts import episodes_from_rows

DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
RAW_ROWS = 500  # steps shown in the raw-data table (the newest)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlhooks dashboard (app)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--refresh", type=float, default=2.0)
    return p.parse_args(argv)


@st.cache_resource(show_spinner=False)
def tail(path: str) -> RunTail:
    return RunTail(path)


# -- plotting -------------------------------------------------------------------------------

def _style(run_i: int, key_i: int, n_runs: int, colour: str | None = None) -> dict[str, Any]:
    """One colour per series (``colour``, else by index) and one dash per run when overlaying runs."""
    return {"color": colour or PALETTE[key_i % len(PALETTE)], "dash": DASHES[run_i % len(DASHES)] if n_runs > 1 else "solid"}


def lines(runs: list[RunTail], keys_of, title: str, label=lambda k: k, yaxis: str = "", height: int = 380) -> go.Figure | None:
    """A line chart of ``keys_of(run)`` for every run; None when no run has any of them."""
    fig = go.Figure()
    all_keys = sorted({k for r in runs for k in keys_of(r)})
    colours = series_colours(label(k) for k in all_keys)  # the report's colours for the same labels
    for ri, run in enumerate(runs):
        df = run.frame
        for key in keys_of(run):
            if key not in df.columns:
                continue
            d = df[["step", key]].dropna()
            if d.empty:
                continue
            name = label(key) if len(runs) == 1 else f"{run.label} · {label(key)}"
            fig.add_trace(go.Scatter(x=d["step"], y=d[key], mode="lines", name=name,
                                     line=_style(ri, all_keys.index(key), len(runs), colours[label(key)])))
    if not fig.data:
        return None
    fig.update_layout(title=title, height=height, margin=dict(l=40, r=10, t=40, b=30), xaxis_title="step",
                      yaxis_title=yaxis, hovermode="x unified",
                      legend=dict(font=dict(size=10), orientation="h", yanchor="top", y=-0.25))
    return fig


def show(fig: go.Figure | None, key: str, missing: str) -> None:
    if fig is None:
        st.info(missing)
    else:
        st.plotly_chart(fig, key=key, config={"displaylogo": False, "displayModeBar": "hover"})


def grid(items: list[tuple[go.Figure | None, str, str]], cols: int = 2) -> None:
    for i in range(0, len(items), cols):
        for col, (fig, key, missing) in zip(st.columns(cols), items[i:i + cols]):
            with col:
                show(fig, key, missing)


def keys(prefix: str, suffix: str = "", exclude_suffix: str | None = None):
    def pick(run: RunTail) -> list[str]:
        cols = run.columns(prefix, suffix)
        return [c for c in cols if not (exclude_suffix and c.endswith(exclude_suffix))]
    return pick


def fixed(*names: str):
    return lambda run: [n for n in names if n in run.frame.columns]


def strip(prefix: str):
    return lambda k: k[len(prefix):] if k.startswith(prefix) else k


VAL_ACC = "/acc/mean@1"  # verl's greedy validation accuracy: val-core/<source>/acc/mean@1


def val_source(key: str) -> str:
    return key[len("val-core/"):-len(VAL_ACC)]


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


# -- panels ---------------------------------------------------------------------------------

def panel_overview(runs: list[RunTail]) -> None:
    st.header("Overview")
    rows = []
    for r in runs:
        rows.append({
            "run": r.label, "status": r.status or "running", "last step": r.last_step,
            "mean reward": r.last("rewards/mean"), "accuracy": r.last("sim/accuracy/mean"),
            "kept ratio": r.last("filter/kept_ratio"), "alerts": _int(r.last("alerts/total")), "file": str(r.path),
        })
    st.table(pd.DataFrame(rows).set_index("run"))
    st.caption(" · ".join(f"{r.label}: last step {r.last_step}, {r.status or 'running'}" for r in runs),
               help="updates while the runs write")
    fig = make_subplots(rows=2, cols=2, subplot_titles=("mean reward", "reward std", "min / max", "signal-to-noise"))
    spots = [("rewards/mean", 1, 1), ("rewards/std", 1, 2), ("rewards/min", 2, 1), ("rewards/max", 2, 1),
             ("rewards/signal_to_noise", 2, 2)]
    for ri, run in enumerate(runs):
        for ki, (key, row, col) in enumerate(spots):
            if key in run.frame.columns:
                d = run.frame[["step", key]].dropna()
                name = f"{run.label} · {key}" if len(runs) > 1 else key
                fig.add_trace(go.Scatter(x=d["step"], y=d[key], mode="lines", name=name,
                                         line=_style(ri, ki, len(runs))), row=row, col=col)
    if fig.data:  # a legend even for one run: the min / max chart has two lines to tell apart
        fig.update_layout(height=520, margin=dict(l=40, r=10, t=40, b=30), showlegend=True,
                          legend=dict(orientation="h", yanchor="top", y=-0.08, xanchor="left", x=0))
    show(fig if fig.data else None, "overview", "No rewards/* metrics yet: enable the reward_monitor plugin.")


def panel_functions(runs: list[RunTail]) -> None:
    st.header("Reward functions and contributions")
    grid([
        (lines(runs, keys("rewards/functions/", exclude_suffix="_std"), "per-function reward (mean)",
               strip("rewards/functions/")), "functions", "No rewards/functions/* metrics (reward_monitor logs them)."),
        (lines(runs, keys("contributions/"), "contribution to the total reward (%)", strip("contributions/"), "%"),
         "contributions", "No contributions/* metrics."),
    ])


def panel_quality(runs: list[RunTail]) -> None:
    st.header("Quality")
    grid([
        (lines(runs, fixed("rewards/signal_to_noise"), "signal-to-noise", strip("rewards/")),
         "snr", "No rewards/signal_to_noise."),
        (lines(runs, fixed("rewards/entropy"), "entropy (nats)", strip("rewards/")), "entropy", "No rewards/entropy."),
        (lines(runs, fixed("rewards/variance"), "reward variance", strip("rewards/")), "variance", "No rewards/variance."),
    ], cols=3)
    for r in runs:
        q = (r.summaries().get("reward_monitor.json") or {}).get("quality")
        if q:
            st.markdown(f"**{r.label}**: quality score **{q['quality_score']:.1f}/100** (consistency "
                        f"{q['consistency']:.2f}, discriminability {q['discriminability']:.2f}, stability "
                        f"{q['stability']:.2f}, coverage {q['coverage']:.2f}; coverage basis: {q.get('coverage_basis', '?')})")
            for issue in q.get("issues", []):
                st.warning(issue)


def panel_hacking(runs: list[RunTail]) -> None:
    st.header("Reward hacking check")
    from rlhooks.report import HACKING_EVIDENCE, hacking_class

    for r in runs:
        st.subheader(r.label)
        hacking = (r.summaries().get("reward_monitor.json") or {}).get("reward_hacking")
        if not isinstance(hacking, dict):
            st.info("no verdict yet: the reward monitor writes it at run end (reward_monitor.json)"
                    if r.status is None else "no reward-hacking check in this run's summary (reward_monitor with analyze_at_end)")
            continue
        verdict = hacking.get("verdict") or ("detected" if hacking.get("detected") else "not detected")
        {"hacking": st.error, "clear": st.success}.get(hacking_class(hacking), st.info)(verdict)
        ev = hacking.get("evidence") or {}
        rows = [{"evidence": label, "value": str(ev[k]) if isinstance(ev[k], str) else f"{ev[k]:.4g}"}
                for k, label in HACKING_EVIDENCE if ev.get(k) is not None]
        if rows:
            st.table(pd.DataFrame(rows).set_index("evidence"))
        suspects = hacking.get("suspect_functions") or []
        if suspects:
            detail = ev.get("suspects") or {}
            st.table(pd.DataFrame([{"suspect reward function": f, **(detail.get(f) or {})} for f in suspects])
                     .set_index("suspect reward function"))


def panel_dynamics(runs: list[RunTail]) -> None:
    st.header("Training dynamics")
    grid([
        (lines(runs, fixed("training/kl_divergence", "training/policy_update_kl"), "KL divergence", strip("training/")), "kl",
         "No training/kl_divergence (KL to the reference: actor/kl_loss) nor training/policy_update_kl (actor/ppo_kl)."),
        (lines(runs, fixed("training/policy_entropy"), "policy entropy", strip("training/")), "policy_entropy",
         "No training/policy_entropy (the engine's actor/entropy)."),
        (lines(runs, fixed("training/advantage_mean", "training/advantage_std"), "advantages", strip("training/")),
         "advantages", "No training/advantage_* metrics."),
    ], cols=3)


def panel_sources(runs: list[RunTail]) -> None:
    st.header("Per-source composition and rewards")

    def per_source(metric: str):
        return lambda run: sorted(cols[metric] for cols in run.sources().values() if metric in cols)

    def source_label(key: str) -> str:
        return key[len("source/"):].rsplit("/", 1)[0]

    comp = go.Figure()
    colours = series_colours(name for run in runs for name in run.sources())
    for ri, run in enumerate(runs):
        counts = {name: cols["count"] for name, cols in run.sources().items() if "count" in cols}
        if not counts:
            continue
        df = run.frame[["step", *counts.values()]].fillna(0.0)
        total = df[list(counts.values())].sum(axis=1).replace(0, float("nan"))
        for si, (name, col) in enumerate(sorted(counts.items())):
            comp.add_trace(go.Scatter(x=df["step"], y=100 * df[col] / total, mode="lines", stackgroup=f"run{ri}",
                                      name=name if len(runs) == 1 else f"{run.label} · {name}",
                                      line=_style(ri, si, len(runs), colours[name])))
    if comp.data:  # legend below the plot: a stacked chart fills its whole area
        comp.update_layout(title="trained rows by source (% of the step)", height=380, yaxis_title="%",
                           margin=dict(l=40, r=10, t=40, b=30), xaxis_title="step",
                           legend=dict(font=dict(size=10), orientation="h", yanchor="top", y=-0.25))
    grid([
        (comp if comp.data else None, "composition", "No source/<name>/count metrics (enable source_metrics)."),
        (lines(runs, per_source("reward"), "mean reward by source (trained)", source_label), "source_reward",
         "No source/<name>/reward metrics."),
        (lines(runs, per_source("acc"), "accuracy by source", source_label), "source_acc", "No source/<name>/acc metrics."),
        (lines(runs, per_source("generated_reward"), "mean reward by source (generated)", source_label),
         "source_generated_reward", "No source/<name>/generated_reward metrics."),
    ])
    # a real learner's curve: verl's validation every trainer.test_freq steps (absent from simulated runs)
    val = lines(runs, keys("val-core/", VAL_ACC), "validation accuracy by source (verl)", val_source, "accuracy")
    if val is not None:
        show(val, "val_acc", "")


def panel_sampler(runs: list[RunTail]) -> None:
    st.header("Sampler weights and curriculum")
    grid([
        (lines(runs, keys("sampler/weight/"), "sampling weight by source", strip("sampler/weight/")), "weights",
         "No sampler/weight/* metrics (a multi-source sampler logs them)."),
        (lines(runs, fixed("curriculum/level"), "curriculum level", strip("curriculum/")), "curriculum_level",
         "No curriculum/level (a curriculum sampler logs it)."),
        (lines(runs, fixed("curriculum/percentile"), "unlocked complexity percentile", strip("curriculum/"), "%"),
         "curriculum_percentile", "No curriculum/percentile."),
        (lines(runs, keys("sampler/reward_ema/") if any(r.columns("sampler/reward_ema/") for r in runs)
               else fixed("curriculum/reward_ema"), "reward EMA", strip("sampler/reward_ema/")), "reward_ema",
         "No reward EMA metrics."),
    ])


def panel_filter(runs: list[RunTail]) -> None:
    st.header("DAPO filter")
    grid([
        (lines(runs, fixed("filter/kept_ratio"), "kept ratio (kept / generated groups)", strip("filter/")), "kept_ratio",
         "No filter/* metrics (add the dapo filter)."),
        (lines(runs, keys("filter/", "groups"), "groups per step", strip("filter/")), "groups", "No filter/*groups metrics."),
        (lines(runs, keys("filter/dropped_"), "dropped groups by reason", strip("filter/dropped_")), "dropped",
         "No filter/dropped_* metrics."),
        (lines(runs, fixed("train/num_gen_batches"), "generation batches per step", strip("train/")), "gen_batches",
         "No train/num_gen_batches."),
    ])


LEVEL_COLOURS = {"info": "#1f77b4", "warning": "#ff7f0e", "critical": "#d62728"}


def alerts_figure(runs: list[RunTail]) -> go.Figure | None:
    """Alerts per step by level (bars, left axis) and the run's running total (line, right axis)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for ri, run in enumerate(runs):
        prefix = f"{run.label} · " if len(runs) > 1 else ""
        for level, colour in LEVEL_COLOURS.items():
            key = f"alerts/{level}"
            if key in run.frame.columns:
                d = run.frame[["step", key]].dropna()
                if d[key].any():
                    fig.add_trace(go.Bar(x=d["step"], y=d[key], name=f"{prefix}{level} (per step)", marker_color=colour,
                                         offsetgroup=str(ri)), secondary_y=False)
        if "alerts/total" in run.frame.columns:
            d = run.frame[["step", "alerts/total"]].dropna()
            fig.add_trace(go.Scatter(x=d["step"], y=d["alerts/total"], mode="lines", name=f"{prefix}total (run)",
                                     line={"color": "#333", "dash": DASHES[ri % len(DASHES)]}), secondary_y=True)
    if not fig.data:
        return None
    fig.update_layout(title="alerts", height=380, barmode="stack", margin=dict(l=40, r=40, t=40, b=30),
                      legend=dict(orientation="h", yanchor="top", y=-0.15, xanchor="left", x=0))
    fig.update_yaxes(title_text="alerts per step", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="total alerts", secondary_y=True, rangemode="tozero", showgrid=False)
    return fig


def panel_alerts(runs: list[RunTail]) -> None:
    st.header("Alerts")
    show(alerts_figure(runs), "alerts", "No alerts/* metrics (the reward_monitor logs them).")
    for r in runs:
        summary = (r.summaries().get("reward_monitor.json") or {}).get("alerts")
        st.subheader(r.label)
        episodes = (summary or {}).get("episodes") if r.status is not None else None
        if episodes is None:
            episodes = episodes_from_rows(r.alert_rows)
        if episodes:
            st.caption("one row per episode: from the step an alert's condition starts to hold until it clears")
            st.table(pd.DataFrame([{"metric": e["metric"], "level": e["level"], "start": e["start"], "end": e["end"],
                                    "steps": e["steps"], "peak": e["peak"], "message": e["message"]}
                                   for e in episodes[-50:]]))
        else:
            st.markdown("no alert fired" + (" so far" if r.status is None else ""))
        if summary:
            by_metric = summary.get("by_metric") or {}
            if by_metric:
                st.table(pd.DataFrame([{"metric": m, **v} for m, v in by_metric.items()]).set_index("metric"))
            for miss in summary.get("never_seen", []):
                hint = f" — did you mean {', '.join(miss['did_you_mean'])}?" if miss.get("did_you_mean") else ""
                st.warning(f"alert on {miss['metric']} never checked: no step logged it{hint}")


def panel_samples(runs: list[RunTail]) -> None:
    st.header("Samples")
    any_table = False
    for r in runs:
        for name, history in sorted(r.tables.items()):
            if name == "alerts" or not history:
                continue
            any_table = True
            steps = [s for s, _ in history]
            step = st.select_slider(f"{r.label} · {name}: step", options=steps, value=steps[-1],
                                    key=f"samples-{r.path}-{name}") if len(steps) > 1 else steps[0]
            rows = dict(history)[step]
            st.caption(f"{r.label} · {name} · step {step} ({len(rows)} rows)")
            st.table(pd.DataFrame(rows))
    if not any_table:
        st.info("No sample tables yet (enable top_bottom_k, random_samples or per_source_samples under samples:).")


def panel_raw(runs: list[RunTail]) -> None:
    st.header("Raw data and run-end summary")
    for r in runs:
        st.subheader(r.label)
        df = r.frame.tail(RAW_ROWS)
        st.dataframe(df, key=f"raw-{r.path}", hide_index=True, height=300)
        # a callable: the CSV is made on click, not on every redraw (20,000 steps x 110 metrics: ~5 s, ~46 MB)
        st.download_button(f"download {r.label} metrics (CSV)", lambda frame=r.frame: frame.set_index("step").to_csv(),
                           file_name=f"{r.name}-metrics.csv", mime="text/csv", key=f"csv-{r.path}")
        summaries = r.summaries()
        if summaries:
            for fname, content in summaries.items():
                st.markdown(f"`{fname}`")
                st.json(content, expanded=2)
        else:
            st.markdown("no run-end summary yet" + (" (the run is still going)" if r.status is None else ""))


PANELS = (
    ("overview", panel_overview), ("hacking", panel_hacking), ("functions", panel_functions), ("quality", panel_quality),
    ("dynamics", panel_dynamics), ("sources", panel_sources), ("sampler", panel_sampler),
    ("filter", panel_filter), ("alerts", panel_alerts), ("samples", panel_samples), ("raw", panel_raw),
)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    st.set_page_config(page_title="rlhooks dashboard", layout="wide")
    try:
        tails = [tail(str(p)) for p in args.runs]
    except DashboardError as exc:
        st.error(str(exc))
        return
    for t in tails:  # the run_start record may rename a run: label after reading it
        t.refresh()
    label_runs(tails)
    with st.sidebar:
        st.title("rlhooks")
        chosen = st.multiselect("runs", [t.label for t in tails], default=[t.label for t in tails])
        sections = st.multiselect("panels", [p for p, _ in PANELS], default=[p for p, _ in PANELS])
        live = st.toggle("live update", value=True, help=f"re-read the files every {args.refresh:g} s")

    runs = [t for t in tails if t.label in chosen]
    seen = {str(t.path): t.version for t in runs}

    @st.fragment(run_every=args.refresh if live else None)
    def watch() -> None:
        # redraw the page only when a file grew: redrawing two dozen charts every tick costs the browser
        for t in runs:
            t.refresh()
        if any(t.version != seen[str(t.path)] for t in runs):
            st.rerun(scope="app")

    watch()
    st.title("rlhooks dashboard")
    if not runs:
        st.info("select a run in the sidebar")
        return
    if all(t.last_step is None for t in runs):
        st.info("waiting for the first metrics line ...")
    for name, panel in PANELS:
        if name in sections:
            with st.container(key=f"panel-{name}", border=True):
                panel(runs)


if __name__ == "__main__":
    main(sys.argv[1:])
