"""``rlhooks report``: PNG charts and one self-contained HTML page from runs' ``metrics.jsonl``.

    from rlhooks.report import write_report
    write_report(["runs/uniform", "runs/curriculum"], "runs/compare-report")

The page embeds every chart as a base64 PNG (it opens anywhere, no server, no other files
needed) and links the PNG files written next to it.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from rlhooks.core.metrics import split_source_key
from rlhooks.core import rundir
from rlhooks.core.rundir import write_atomic
from rlhooks.report.charts import CHARTS, render_chart
from rlhooks.report.reader import ReportError, RunData, Table, load_run

log = structlog.get_logger("rlhooks.report")

REPORT_FILE = "report.html"
MAX_CELL = 400  # characters of text shown per table cell
#: sources drawn per chart at most: with thousands, the largest (most trained rows) are drawn and the
#: page says so; drawing every one takes minutes and no reader can tell 10,000 lines apart
MAX_REPORT_SOURCES = 10
#: keys named ``<prefix><source>`` (besides ``source/<source>/<metric>``)
_PER_SOURCE_PREFIXES = ("sim/accuracy/", "sim/skill/", "sampler/weight/", "sampler/reward_ema/",
                        "sim/malformed_rate/")
#: final values shown per run in the page header
HEADLINE = (
    ("sim/accuracy/mean", "mean accuracy"), ("rewards/mean", "mean reward"), ("curriculum/level", "curriculum level"),
    ("curriculum/percentile", "curriculum percentile"), ("filter/kept_ratio", "kept ratio"),
    ("train/num_gen_batches", "gen batches/step"), ("sim/generated_trajectories", "generated trajectories (run total)"),
    ("sim/trained_trajectories", "trained trajectories (run total)"), ("alerts/total", "alerts"),
)

__all__ = ["write_report", "load_run", "RunData", "ReportError"]


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Charts (PNG) and report.html for ``run_dirs`` in ``out_dir``; returns the page's path."""
    if not run_dirs:
        raise ReportError("give at least one run directory")
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    for i, r in enumerate(runs):  # two runs with one name (e.g. two default configs) stay apart
        if names.count(r.name) > 1:
            r.name = f"{r.name} ({Path(r.path).parent})"
    out = Path(out_dir)
    rundir.claim(out)  # inside a run being written: the run's own (a rerun replaces it)
    out.mkdir(parents=True, exist_ok=True)
    charts: list[tuple[str, Path]] = []
    notes: list[str] = [n for r in runs for n in [_keep_largest_sources(r)] if n]
    for chart in CHARTS:
        try:
            path = render_chart(chart, runs, out)
        except Exception as exc:  # noqa: BLE001 - one bad chart must not lose the others
            log.warning("chart failed; skipped", chart=chart.file, error=f"{type(exc).__name__}: {exc}")
            notes.append(f"{chart.title}: could not be drawn ({type(exc).__name__}: {exc})")
            continue
        if path is None:
            notes.append(f"{chart.title_for(runs)}: skipped, {chart.missing_note}.")
        else:
            charts.append((chart.title_for(runs), path))
    page = out / REPORT_FILE
    write_atomic(page, _page(runs, charts, notes))  # a reader never sees half a page (a full disk)
    log.info("report written", page=str(page), charts=len(charts), skipped=len(notes))
    return page


# -- HTML ---------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1320px;color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:16px 0} figure img{max-width:100%;border:1px solid #eee} figcaption{font-size:12px;color:#666}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:12px;max-width:520px}
.note{color:#8a5a00} details{margin:8px 0} .muted{color:#777;font-size:12px}
.samples{overflow-x:auto} .samples td pre.long{min-width:34ch;max-width:70ch}
.verdict{padding:8px 12px;border-left:4px solid #888;background:#f7f7f7} .verdict.hacking{border-color:#c0392b;background:#fdecea}
.verdict.clear{border-color:#27ae60;background:#eafaf1}
"""


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000 and float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _source_of(key: str, known: set[str]) -> str | None:
    split = split_source_key(key)
    if split is not None:
        return split[0]
    for prefix in _PER_SOURCE_PREFIXES:
        if key.startswith(prefix) and key != prefix + "mean":
            return key[len(prefix):]
    parts = key.split("/", 2)  # e.g. sim/malformed_rate/<source>: any <group>/<metric>/<a known source>
    return parts[2] if len(parts) == 3 and parts[2] in known else None


def _keep_largest_sources(run: RunData, limit: int = MAX_REPORT_SOURCES) -> str | None:
    """Drop the series of all but the ``limit`` largest sources of ``run``; a note saying so, or None."""
    known = {src for key in run.series for src in [_source_of(key, set())] if src is not None}
    if len(known) <= limit:
        return None
    by_source: dict[str, list[str]] = {}
    for key in run.series:
        src = _source_of(key, known)
        if src is not None:
            by_source.setdefault(src, []).append(key)
    if len(by_source) <= limit:
        return None

    def size(src: str) -> tuple[float, float]:  # trained rows, then generated rows
        return tuple(float(np.nansum(run.series[k][1])) if k in run.series else 0.0
                     for k in (f"source/{src}/count", f"source/{src}/generated_count"))

    kept = sorted(by_source, key=lambda src: (*(-x for x in size(src)), src))[:limit]
    for src in set(by_source) - set(kept):
        for key in by_source[src]:
            del run.series[key]
    return (f"{run.name}: {len(by_source):,} sources; the {limit} largest (most trained rows) are drawn: "
            f"{', '.join(kept)}")


def _page(runs: list[RunData], charts: list[tuple[str, Path]], notes: list[str]) -> str:
    title = "rlhooks report — " + " vs ".join(r.name for r in runs)
    parts = [
        "<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f"<p class='muted'>written {time.strftime('%Y-%m-%d %H:%M:%S')} by rlhooks report from "
        + ", ".join(f"<code>{_esc(r.path)}</code>" for r in runs) + "</p>",
        "<h2>Runs</h2>", _runs_table(runs),
    ]
    if notes:
        parts.append("<h2>Skipped charts</h2><ul>" + "".join(f"<li class='note'>{_esc(n)}</li>" for n in notes) + "</ul>")
    parts.append("<h2>Charts</h2>")
    for chart_title, path in charts:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f"<figure id='{_esc(path.stem)}'><img alt='{_esc(chart_title)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{_esc(chart_title)} — <a href='{_esc(path.name)}'>{_esc(path.name)}</a></figcaption></figure>"
        )
    parts.append("<h2 id='reward-hacking'>Reward hacking check</h2>")
    parts.extend(_hacking_section(r) for r in runs)
    parts.append("<h2 id='quality'>Reward quality</h2>")
    parts.extend(_quality_section(r) for r in runs)
    parts.append("<h2 id='alerts'>Alerts</h2>")
    parts.extend(_alerts_section(r) for r in runs)
    parts.append("<h2>Samples</h2>")
    any_table = False
    for run in runs:
        for name in sorted(run.last_tables):
            first, last = run.first_tables[name], run.last_tables[name]
            shown = [first, last] if first.step != last.step else [last]
            for t in shown:
                any_table = True
                parts.append(f"<h3>{_esc(run.name)} · {_esc(name)} · step {t.step}</h3>")
                parts.append("<div class='samples'>" + _table(t) + "</div>")
            count = run.table_counts[name]
            shown_note = "it is shown" if count == 1 else "the first and the last are shown"
            parts.append(f"<p class='muted'>{count} table{'s' if count != 1 else ''} named {_esc(name)} "
                         f"in this run; {shown_note}.</p>")
    if not any_table:
        parts.append(f"<p class='note'>{_esc(no_tables_note(runs))}</p>")
    parts.append("<h2>Configs</h2>")
    for run in runs:
        parts.append(f"<details><summary>{_esc(run.name)}</summary><pre>{_esc(json.dumps(run.config, indent=2, default=str))}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


MONITOR_SUMMARY = "reward_monitor.json"  # the reward monitor's run-end summary, next to metrics.jsonl


def _monitor_summary(run: RunData) -> tuple[dict[str, Any] | None, str | None]:
    """The reward monitor's run-end summary of a run, or why there is none."""
    path = Path(run.path).parent / MONITOR_SUMMARY
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {MONITOR_SUMMARY} (the run is unfinished or has no reward_monitor)"
    except (OSError, ValueError) as exc:
        return None, f"cannot read {path.name}: {exc}"
    return (data, None) if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


#: evidence figures shown in the hacking panel, in order, with their labels
HACKING_EVIDENCE = (
    ("task_signal", "task signal"), ("steps", "steps checked"), ("reward_early", "mean reward, first third"),
    ("reward_late", "mean reward, last third"), ("reward_rise_in_std", "reward rise (batch std)"),
    ("task_early", "task signal, first third"), ("task_late", "task signal, last third"),
    ("task_change_in_se", "task change (standard errors)"), ("task_peak", "task signal, best window"),
    ("task_change_since_peak_in_se", "task change since best (standard errors)"), ("kl_growth", "KL growth (of its mean)"),
)


def hacking_class(hacking: dict[str, Any]) -> str:
    """CSS class of a verdict: hacking (flagged), clear (not flagged with a task signal), else unknown
    (no task signal, or a run too short to judge)."""
    if hacking.get("detected"):
        return "hacking"
    if hacking.get("confidence") == "none":
        return "unknown"
    return "clear" if hacking.get("task_signal") else "unknown"


def _hacking_section(run: RunData) -> str:
    head = f"<h3>{_esc(run.name)}</h3>"
    summary, why = _monitor_summary(run)
    hacking = (summary or {}).get("reward_hacking")
    if not isinstance(hacking, dict):
        return head + f"<p class='muted'>No reward-hacking check: {_esc(why or 'the summary has none (analyze_at_end off?)')}.</p>"
    verdict = hacking.get("verdict") or ("detected: " + "; ".join(hacking.get("reasons") or []) if hacking.get("detected") else "not detected")
    out = [head, f"<p class='verdict {hacking_class(hacking)}'><b>{_esc(verdict)}</b></p>"]
    ev = hacking.get("evidence") or {}
    rows = [(label, ev[k]) for k, label in HACKING_EVIDENCE if ev.get(k) is not None]
    if rows:
        out.append("<table><tr><th>evidence</th><th>value</th></tr>" + "".join(
            f"<tr><td>{_esc(lab)}</td>{_cell(v)}</tr>" for lab, v in rows) + "</table>")
    if ev.get("kl_note"):
        out.append(f"<p class='muted'>{_esc(ev['kl_note'])}</p>")
    suspects = hacking.get("suspect_functions") or []
    if suspects:
        detail = ev.get("suspects") or {}
        out.append("<table><tr><th>suspect reward function</th><th>trend</th><th>correlation with the task signal</th></tr>"
                   + "".join(f"<tr><td>{_esc(f)}</td>{_cell((detail.get(f) or {}).get('trend'))}"
                             f"{_cell((detail.get(f) or {}).get('correlation_with_task'))}</tr>" for f in suspects) + "</table>")
    elif hacking.get("detected"):
        out.append("<p class='muted'>No single reward function rises apart from the task signal.</p>")
    return "".join(out)


def _quality_section(run: RunData) -> str:
    head = f"<h3>{_esc(run.name)}</h3>"
    summary, why = _monitor_summary(run)
    q = (summary or {}).get("quality")
    if not isinstance(q, dict):
        return head + f"<p class='muted'>No quality score: {_esc(why or (summary or {}).get('quality_error') or 'not computed')}.</p>"
    dims = ["consistency", "discriminability", "stability", "coverage"]
    out = [head, f"<p>quality score <b>{_fmt(q.get('quality_score'))}</b> / 100 over steps {_esc(q.get('first_step'))}.."
           f"{_esc(q.get('last_step'))} (coverage against the {_esc(q.get('coverage_basis'))})</p>",
           "<table><tr>" + "".join(f"<th>{d}</th>" for d in dims) + "</tr><tr>"
           + "".join(_cell(q.get(d)) for d in dims) + "</tr></table>"]
    issues = q.get("issues") or []
    recs = q.get("recommendations") or []
    if issues:
        out.append("<ul>" + "".join(f"<li class='note'>{_esc(i)}</li>" for i in issues) + "</ul>")
    if recs:
        out.append("<ul>" + "".join(f"<li>{_esc(r)}</li>" for r in recs) + "</ul>")
    return "".join(out)


def _alerts_section(run: RunData) -> str:
    """The run's alert summary from the reward monitor's run-end file (or what metrics.jsonl says)."""
    head = f"<h3>{_esc(run.name)}</h3>"
    path = Path(run.path).parent / MONITOR_SUMMARY
    try:
        alerts = json.loads(path.read_text(encoding="utf-8")).get("alerts")
    except FileNotFoundError:
        alerts = None
    except (OSError, ValueError, AttributeError) as exc:
        return head + f"<p class='note'>cannot read {_esc(path.name)}: {_esc(exc)}</p>"
    if not isinstance(alerts, dict):
        total = run.last("alerts/total")
        if total is None:
            return head + "<p class='muted'>No alert metrics (the reward_monitor plugin logs them).</p>"
        return head + (f"<p>{int(total)} alert(s) so far; the run-end summary ({_esc(MONITOR_SUMMARY)}) is not "
                       "written yet (the run is unfinished or has no reward_monitor).</p>")
    by_level = alerts.get("by_level") or {}
    out = [head, f"<p><b>{int(alerts.get('total', 0))}</b> alert(s): "
           + ", ".join(f"{_esc(k)} {int(v)}" for k, v in by_level.items()) + "</p>"]
    by_metric = alerts.get("by_metric") or {}
    if by_metric:
        out.append("<table><tr><th>metric</th><th>alerts</th><th>first step</th><th>last step</th></tr>" + "".join(
            f"<tr><td>{_esc(m)}</td><td class='num'>{int(v.get('count', 0))}</td><td class='num'>{_esc(v.get('first_step'))}"
            f"</td><td class='num'>{_esc(v.get('last_step'))}</td></tr>" for m, v in by_metric.items()) + "</table>")
    episodes = alerts.get("episodes")
    if episodes:
        out.append("<p class='muted'>one row per episode: from the step an alert's condition starts to hold until it clears</p>"
                   "<table><tr><th>metric</th><th>level</th><th>start</th><th>end</th><th>steps</th><th>peak</th>"
                   "<th>message</th></tr>" + "".join(
                       f"<tr><td>{_esc(e.get('metric'))}</td><td>{_esc(e.get('level'))}</td><td class='num'>{_esc(e.get('start'))}</td>"
                       f"<td class='num'>{_esc(e.get('end'))}{' (ongoing)' if e.get('ongoing') else ''}</td>"
                       f"<td class='num'>{_esc(e.get('steps'))}</td>{_cell(e.get('peak'))}<td>{_esc(e.get('message'))}</td></tr>"
                       for e in episodes[-50:]) + "</table>")
    recent = [] if episodes else (alerts.get("recent") or [])
    if recent:
        out.append("<details><summary>latest alerts</summary><table><tr><th>step</th><th>level</th><th>message</th></tr>"
                   + "".join(f"<tr><td class='num'>{_esc(a.get('step'))}</td><td>{_esc(a.get('level'))}</td>"
                             f"<td>{_esc(a.get('message'))}</td></tr>" for a in recent) + "</table></details>")
    for miss in alerts.get("never_seen") or []:
        hint = f"; did you mean {', '.join(miss.get('did_you_mean') or [])}?" if miss.get("did_you_mean") else ""
        out.append(f"<p class='note'>alert on {_esc(miss.get('metric'))} never checked: no step logged it{_esc(hint)}</p>")
    return "".join(out)


def no_tables_note(runs: list[RunData]) -> str:
    """Why the page has no sample tables: none configured, or the runs ended before a table's ``every:``."""
    configured = [(run, c) for run in runs for c in (run.config.get("samples") or []) if isinstance(c, dict)]
    if not configured:
        return "No sample tables were logged (enable top_bottom_k under samples:)."
    named = ", ".join(sorted({f"{c.get('name')} (every {c.get('every', 1)} steps)" for _, c in configured}))
    last = max((int(run.series_steps()[-1]) for run in runs if len(run.series_steps())), default=0)
    return (f"No sample tables were logged: samples: names {named}, and the run logged no table in its "
            f"{last} step{'s' if last != 1 else ''} (a table is written at the steps that are a multiple of "
            f"its every:; set a smaller every: for a short run).")


#: verl's validation accuracy per source: ``val-core/<source>/acc/mean@<n>`` (the core metric of verl's
#: validation; the report's chart and the runs table read it)
VALIDATION_ACCURACY = re.compile(r"val-core/(?P<label>.+)/acc/mean@\d+")


def validation_accuracy(run: RunData) -> tuple[float, float, int, int] | None:
    """(first, last) mean over sources of verl's validation accuracy, and their steps; None without any."""
    keys = [k for k in run.series if VALIDATION_ACCURACY.fullmatch(k)]
    if not keys:
        return None
    steps = np.unique(np.concatenate([run.series[k][0] for k in keys]))

    def mean_at(step: int) -> float:
        vals = [v[s == step][0] for k in keys for s, v in [run.series[k]] if np.any(s == step)]
        finite = [x for x in vals if np.isfinite(x)]
        return float(np.mean(finite)) if finite else float("nan")

    return mean_at(int(steps[0])), mean_at(int(steps[-1])), int(steps[0]), int(steps[-1])


def trainer_of(run: RunData) -> str:
    """The trainer and mode: summary.json's (``rlhooks train`` and ``rlhooks simulate`` write it at the end),
    else what the metrics show (a run still running)."""
    try:
        summary = json.loads((Path(run.path).parent / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict) and summary.get("trainer"):
        mode = summary.get("mode")
        return f"{summary['trainer']}, {mode}" if mode else str(summary["trainer"])
    asynchronous = any(k.startswith("staleness/") for k in run.series)
    if any(k.startswith("sim/") for k in run.series):
        return "simulated" + (", async" if asynchronous else "")
    if "training/global_step" in run.series or any(k.startswith("actor/") for k in run.series):
        return "verl" + (", async" if asynchronous else "")
    return "-"


def _runs_table(runs: list[RunData]) -> str:
    keys = [(k, label) for k, label in HEADLINE if any(r.has(k) for r in runs)]
    val = {id(r): validation_accuracy(r) for r in runs}
    lag = any(r.has("staleness/lag_mean") for r in runs)
    head = ("<tr><th>run</th><th>trainer</th><th>steps</th><th>status</th>"
            + ("<th>validation accuracy (first &rarr; last, mean over sources)</th>" if any(val.values()) else "")
            + ("<th>lag (mean, policy updates)</th>" if lag else "")
            + "".join(f"<th>{_esc(lab if 'total' in lab else lab + ' (last)')}</th>" for _, lab in keys) + "</tr>")
    rows = []
    for r in runs:
        extra = ""
        if any(val.values()):
            v = val[id(r)]
            extra += ("<td>-</td>" if v is None else
                      f"<td class='num'>{_fmt(v[0])} (step {v[2]}) &rarr; {_fmt(v[1])} (step {v[3]})</td>")
        if lag:
            s = r.series.get("staleness/lag_mean")
            finite = s[1][np.isfinite(s[1])] if s is not None else np.array([])
            extra += f"<td class='num'>{_fmt(float(finite.mean()) if len(finite) else None)}</td>"
        cells = "".join(f"<td class='num'>{_fmt(r.last(k))}</td>" for k, _ in keys)
        rows.append(f"<tr><td>{_esc(r.name)}</td><td>{_esc(trainer_of(r))}</td><td class='num'>{r.n_steps}</td>"
                    f"<td>{_esc(r.status or 'unfinished')}</td>{extra}{cells}</tr>")
    return "<table>" + head + "".join(rows) + "</table>"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"<td class='num'>{v:.4g}</td>"
    if isinstance(v, (int, bool)) or v is None:
        return f"<td class='num'>{_esc(v)}</td>"
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    if len(text) > MAX_CELL:
        text = text[:MAX_CELL] + f"… (+{len(text) - MAX_CELL} chars)"
    long = " class='long'" if len(text) > 40 else ""  # prompts and responses get room; short labels do not
    return f"<td><pre{long}>{_esc(text)}</pre></td>"


def _table(t: Table) -> str:
    cols: dict[str, None] = {}
    for row in t.rows:
        for k in row:
            cols.setdefault(k, None)
    head = "<tr>" + "".join(f"<th>{_esc(c)}</th>" for c in cols) + "</tr>"
    body = "".join("<tr>" + "".join(_cell(row.get(c)) for c in cols) + "</tr>" for row in t.rows)
    return "<table>" + head + body + "</table>"
