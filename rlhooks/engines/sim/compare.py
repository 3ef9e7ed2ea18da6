"""``rlhooks simulate --compare A.yaml B.yaml ...``: the same data, seed and target under several configs.

Each config runs as ``<out>/compare/<config file stem>``; the generated dataset is written once
(``<out>/compare/data.parquet``) unless ``--data`` names one. The first config (with the command's
overrides) sets the data, ``run.seed`` and ``simulate.target_accuracy`` of every run, so one table
compares like with like. The comparison table (also written as comparison.md and comparison.json)
gives per source the first step whose simulated accuracy reached ``simulate.target_accuracy``, the
final accuracy, the trajectories generated until the mean accuracy first reached the target
(``generated_to_target``, next to the final mean accuracy), and the generated vs trained
trajectories (what the filters cost).

``<out>/compare/`` is owned like a run directory (core/rundir.py): it carries the marker of
``rlhooks simulate --compare``, every entry it writes is claimed first, and a rerun rewrites (each
file atomically, never through a link) only the entries an earlier comparison recorded, after
checking all of them and every run: a foreign file at one of its names, a link, a directory some
other command made (a single run named ``compare``), or a config whose stem is one of its names is
refused before any run starts. The earlier comparison's other runs stay, and stay its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlhooks.core import interrupt
from rlhooks.core.errors import RLHooksError
from rlhooks.core.rundir import (
    BOOKKEEPING,
    RunDirectory,
    check_replaceable,
    check_run_name,
    locked,
    open_atomic,
    write_atomic,
)
from rlhooks.engines.sim.runs import DEFAULT_REPORT_TIMEOUT_S, load_plotting, safe_name, simulate_run, try_report
from rlhooks.engines.sim.data import write_dataset
from rlhooks.engines.sim.engine import load_sim_config, sim_options


#: what a comparison writes in ``<out>/compare/`` besides its runs (no config stem may name one of them)
COMPARISON_FILES = ("data.parquet", "report", "generated_vs_accuracy.png", "comparison.json", "comparison.md")
COMMAND = "rlhooks simulate --compare"
_HINT = "choose another --out (a comparison is written to <out>/compare/), or move it away yourself"


def run_names(configs: Sequence[str | Path]) -> list[str]:
    """The run name of each config: its file stem made safe, a repeated stem numbered (``a``, ``a-2``).
    A stem that is one of the comparison's own files (``report.yaml``) is refused, naming the config."""
    reserved = {n.casefold() for n in (*COMPARISON_FILES, *BOOKKEEPING)}
    names: list[str] = []
    for c in configs:
        base = safe_name(Path(c).stem)
        problem = check_run_name(base)
        if problem is None and base.casefold() in reserved:
            problem = f"is {base!r}, a file the comparison itself writes in <out>/compare/ ({', '.join(COMPARISON_FILES)})"
        if problem:
            raise RLHooksError(f"--compare config {c}: its run is named after the file's stem, which {problem}; "
                               f"rename or copy the config file (nothing was run)")
        name, i = base, 2
        while name.casefold() in {n.casefold() for n in names}:  # one directory also on a case-insensitive disk
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def compare(
    configs: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    data: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool = False,
    report: bool = True,
    report_timeout_s: float | None = DEFAULT_REPORT_TIMEOUT_S,
) -> dict[str, Any]:
    """Run every config on the same data and seed; returns {"runs": [summaries], "report": path, ...}."""
    if len(configs) < 2:
        raise RLHooksError("--compare needs at least two configs")
    for c in configs:
        if not Path(c).exists():
            raise RLHooksError(f"config {c} does not exist")
    names = run_names(configs)
    problem = interrupt.check_time_bound(report_timeout_s)
    if problem:
        raise RLHooksError(f"report_timeout_s (--report-timeout) {problem}")
    root = Path(out or "runs") / "compare"
    if root.is_symlink():  # before the lock, which would be created through it
        check_replaceable(root, COMMAND, rewrites=COMPARISON_FILES, hint=_HINT)
    # one comparison at a time in a root: another would replace this one's finished runs and data
    with locked(root, COMMAND):
        # every refusal before anything is written, so a refusal leaves the earlier comparison whole
        check_replaceable(root, COMMAND, rewrites=COMPARISON_FILES, hint=_HINT)
        for name in names:
            check_replaceable(root / name, "rlhooks simulate")
        with RunDirectory.create(root.parent, root.name, command=COMMAND, rewrites=COMPARISON_FILES,
                                 hint=_HINT) as rd:
            for name in names:
                rd.claim(name)
            result = _compare_in(root, configs, names, overrides, data=data, progress=progress, report=report,
                                 report_timeout_s=report_timeout_s)
            rd.finish("success" if all(r["status"] == "success" for r in result["runs"]) else "failed")
    return result


def _compare_in(
    root: Path, configs: Sequence[str | Path], names: Sequence[str], overrides: Sequence[str], *,
    data: str | Path | None, progress: bool, report: bool, report_timeout_s: float | None = DEFAULT_REPORT_TIMEOUT_S,
) -> dict[str, Any]:
    first = load_sim_config(configs[0], overrides=[o for o in overrides if o.startswith(("simulate.", "run.seed"))])
    if data is None:
        opts = sim_options(first)
        data = opts.data or write_dataset(root / "data.parquet", opts.rows_per_source, opts.data_seed, opts.sources)
    seed = first.run.seed
    target = sim_options(first).target_accuracy  # one target for the whole table (its rows name it)
    summaries = []
    for c, name in zip(configs, names):
        run_overrides = [*overrides, f"run.name={name}", f"run.out_dir={root}", f"run.seed={seed}",
                         f"simulate.target_accuracy={target!r}"]
        summaries.append(simulate_run(c, run_overrides, data=data, progress=progress, report=False))
    result: dict[str, Any] = {"configs": [str(c) for c in configs], "data": str(data), "seed": seed, "runs": summaries}
    if report:
        result["report"] = try_report([Path(s["run_dir"]) for s in summaries], root / "report", timeout_s=report_timeout_s)
    result["generation_chart"] = _try_generation_chart(summaries, root / "generated_vs_accuracy.png")
    write_atomic(root / "comparison.json", json.dumps(result, indent=2, default=str) + "\n")
    write_atomic(root / "comparison.md", format_comparison(result) + "\n")
    return result


def format_comparison(result: dict[str, Any]) -> str:
    runs = result["runs"]
    names = [r["name"] for r in runs]
    target = runs[0]["target_accuracy"]
    sources = list(dict.fromkeys(s for r in runs for s in r["sources"]))
    rows: list[list[str]] = []
    for s in sources:
        cells = []
        for r in runs:
            v = r["sources"].get(s, {}).get("steps_to_target")
            cells.append("-" if v is None else str(v))
        rows.append([f"steps to {target:.2f}: {s}", *cells])
    for s in sources:
        cells = []
        for r in runs:
            v = r["sources"].get(s, {}).get("accuracy")
            cells.append("-" if v is None else f"{v:.3f}")
        rows.append([f"final accuracy: {s}", *cells])
    rows.append([f"steps to {target:.2f}: mean", *["-" if r.get("steps_to_target") is None else str(r["steps_to_target"]) for r in runs]])
    rows.append(["final accuracy: mean", *[f"{r['mean_accuracy']:.3f}" if r["mean_accuracy"] is not None else "-" for r in runs]])
    rows.append([f"generated to {target:.2f}: mean",
                 *["-" if r.get("generated_to_target") is None else f"{r['generated_to_target']:,}" for r in runs]])
    rows.append(["generated trajectories", *[f"{r['generated_trajectories']:,}" for r in runs]])
    rows.append(["trained trajectories", *[f"{r['trained_trajectories']:,}" for r in runs]])
    rows.append(["trained / generated", *[f"{r['filter_efficiency']:.0%}" if r["filter_efficiency"] else "-" for r in runs]])
    rows.append(["seconds", *[f"{r['seconds']:.1f}" for r in runs]])
    head = ["", *names]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [f"Comparison on {result['data']} (seed {result['seed']}); '-' = target not reached", line(head),
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    if result.get("report"):
        out.append(f"report: {result['report']}")
    return "\n".join(out)


def generation_curves(run_dir: str | Path) -> tuple[list[float], list[float]]:
    """(cumulative generated trajectories, mean accuracy) per step, from a run's metrics.jsonl."""
    from rlhooks.core.records import read_records

    xs: list[float] = []
    ys: list[float] = []
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():  # a run without a jsonl backend (or one that lost its file) has no curve
        return xs, ys
    for _, rec in read_records(path):
        m = (rec or {}).get("metrics") if (rec or {}).get("kind") == "metrics" else None
        if m and m.get("sim/generated_trajectories") is not None and m.get("sim/accuracy/mean") is not None:
            xs.append(float(m["sim/generated_trajectories"]))
            ys.append(float(m["sim/accuracy/mean"]))
    return xs, ys


def write_generation_chart(summaries: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Mean accuracy against trajectories generated, one line per run, the target as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for s in summaries:
        xs, ys = generation_curves(s["run_dir"])
        if not xs:
            continue
        line, = ax.plot([x / 1000 for x in xs], ys, label=s["name"], linewidth=1.8)
        if s.get("generated_to_target") is not None:
            ax.axvline(s["generated_to_target"] / 1000, color=line.get_color(), linestyle=":", linewidth=1)
    target = summaries[0]["target_accuracy"] if summaries else None
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:.2f}")
    ax.set_xlabel("trajectories generated (thousands)")
    ax.set_ylabel("mean accuracy (sim/accuracy/mean)")
    ax.set_title("Accuracy per generated trajectory (dotted: generated to target)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(path)
    try:
        with open_atomic(path) as fh:  # never through a link at path, never a cut PNG
            fig.savefig(fh, format="png")
    finally:
        plt.close(fig)
    return path


def _try_generation_chart(summaries: Sequence[dict[str, Any]], path: Path) -> str | None:
    if not load_plotting():  # matplotlib is the optional 'report' extra
        return None
    return str(write_generation_chart(summaries, path))
