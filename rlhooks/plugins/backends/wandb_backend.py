"""WandbBackend: a real Weights & Biases run (online, offline or disabled).

* metrics -> ``run.log(metrics, step=step)``, always with the explicit training step;
* tables -> ``wandb.Table``: by default one *incremental* table per name (each step's rows are
  appended and only the new rows are uploaded; wandb >= 0.19), else (``table_mode: per_step``
  or an older wandb) a new table per step under the same key;
* histograms -> ``wandb.Histogram``;
* the run's config, with secrets redacted, as the W&B config;
* every metric is defined against the training step (``wandb.define_metric("*",
  step_metric="train/step")``; ``train/step`` is logged with each step), so W&B's charts and run
  comparisons use the training step as x axis;
* the reward_monitoring document's custom charts (``CHARTS``), as W&B line-series custom charts
  under ``charts/<name>``: reward breakdown per function, quality metrics, training dynamics,
  alerts (anomaly detection) and contributions. They are drawn from the values logged so far,
  at run end and every ``chart_every`` steps (0: run end only). Each charted key keeps at most
  ``chart_points`` points in memory (evenly thinned as the run grows), so a multi-day run's chart
  data stays bounded; W&B's own run charts keep every logged value.

Table columns: a table's columns are fixed by the rows of its first call (union of their keys,
in first-seen order) plus a last column ``_extra``. A later row without a column gets None
there; a later row with a key that is not a column is not dropped: its extra keys are kept,
JSON-encoded, in ``_extra``, and a warning naming them is logged once per table.

Resumed runs continue their W&B run: the W&B run id is part of the backend's ``state_dict()``,
saved with the run's checkpoint; a run resumed from it calls ``wandb.init(id=<that id>,
resume="allow")``, so W&B appends the resumed steps to the same run (offline runs: ``wandb sync``
uploads both directories into the one run). ``id`` / ``resume`` set it explicitly.

``wandb`` is imported in ``on_run_start`` only, so loading the entry point is cheap.
"""

from __future__ import annotations

import inspect
import json
import re
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import structlog

from rlhooks import claim_output, hookimpl
from rlhooks.plugins.backends._common import DispatchOptions, columns_of, json_safe, plain, to_number

log = structlog.get_logger("rlhooks.backends")

EXTRA_COLUMN = "_extra"
#: the x axis every metric is defined against
STEP_METRIC = "train/step"
#: custom chart key (under charts/) -> (title, regex of the metric keys it draws)
CHARTS: dict[str, tuple[str, str]] = {
    "reward_breakdown": ("Reward Breakdown: per-function rewards", r"^rewards/functions/(?!.*_std$)"),
    "quality_metrics": ("Quality Metrics: SNR, entropy, variance", r"^rewards/(signal_to_noise|entropy|variance)$"),
    "training_dynamics": ("Training Dynamics: KL, policy entropy, advantages",
                          r"^training/(kl_divergence|policy_update_kl|policy_entropy|advantage_mean|advantage_std)$"),
    "alerts": ("Anomaly Detection: alerts per step by level", r"^alerts/(info|warning|critical)$"),
    "contributions": ("Contributions: % of the total reward by function", r"^contributions/"),
}
_CHART_RX = {name: re.compile(rx) for name, (_title, rx) in CHARTS.items()}


@attrs.define
class _ChartSeries:
    """One charted key's points, at most ``limit`` plus the latest: when full, every other point is
    dropped and only every ``stride``-th later value is kept, so the points stay evenly spread
    over the run. The latest value is always drawn, so a chart ends where the run is."""

    limit: int
    steps: array = attrs.field(factory=lambda: array("q"))
    values: array = attrs.field(factory=lambda: array("d"))
    stride: int = 1
    seen: int = 0
    latest: tuple[int, float] | None = None

    def add(self, step: int, value: float) -> None:
        self.seen += 1
        self.latest = (step, value)
        if (self.seen - 1) % self.stride:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > self.limit:
            self.steps, self.values = self.steps[::2], self.values[::2]
            self.stride *= 2

    def points(self) -> tuple[list[int], list[float]]:
        steps, values = self.steps.tolist(), self.values.tolist()
        if self.latest is not None and (not steps or steps[-1] != self.latest[0]):
            steps.append(self.latest[0])
            values.append(self.latest[1])
        return steps, values


@attrs.define
class _TableState:
    columns: list[str]
    table: Any = None  # the incremental wandb.Table, when used
    rows: int = 0  # rows in the current incremental table
    warned: set[str] = attrs.field(factory=set)


class WandbBackend:
    """Logs to a W&B run created in ``on_run_start`` and finished in ``on_run_end``."""

    @attrs.frozen(kw_only=True)
    class Options(DispatchOptions):
        project: str = "rlhooks"
        entity: str | None = None
        #: W&B run name; default: the rlhooks run name (``name`` itself selects the backend)
        run_name: str | None = None
        #: online, offline or disabled; default: wandb's own (WANDB_MODE, else online)
        mode: Literal["online", "offline", "disabled"] | None = None
        #: where wandb writes its files; default: the run directory (relative paths are under it)
        dir: str | None = None
        tags: list[str] = attrs.field(factory=list)
        group: str | None = None
        job_type: str | None = None
        notes: str | None = None
        #: one incremental table per name, or a new table per step
        table_mode: Literal["incremental", "per_step"] = "incremental"
        #: an incremental wandb.Table keeps every row in memory: start a new one after this many rows
        max_incremental_rows: int = attrs.field(default=10_000, validator=attrs.validators.gt(0))
        histograms: bool = True
        #: upload the (redacted) rlhooks config as the W&B run config
        log_config: bool = True
        #: extra wandb.Settings fields, e.g. {console: "off"}
        settings: dict[str, Any] = attrs.field(factory=dict)
        #: draw the custom charts (CHARTS) at run end
        charts: bool = True
        #: ...and every this many steps as well (0 = at run end only)
        chart_every: int = attrs.field(default=0, validator=attrs.validators.ge(0))
        #: points kept per charted key (memory bound on long runs; thinned evenly past it)
        chart_points: int = attrs.field(default=2_000, validator=attrs.validators.ge(2))
        #: W&B run id (lowercase letters and digits): log into this W&B run; default: a new id, saved
        #: with the run's checkpoint so a resumed run continues the same W&B run
        id: str | None = attrs.field(default=None, validator=attrs.validators.optional(
            attrs.validators.matches_re(r"^[a-z0-9_-]{1,64}$")))
        #: wandb.init's ``resume`` (allow, must, never, auto); default: "allow" on a resumed run, unset otherwise
        resume: Literal["allow", "must", "never", "auto"] | None = None

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self.run: Any = None
        self._wandb: Any = None
        self._tables: dict[str, _TableState] = {}
        self._incremental = False
        self._chart_data: dict[str, _ChartSeries] = {}  # charted metric key -> its kept points
        self._chart_of: dict[str, str | None] = {}  # metric key -> chart name (None: not charted)
        self._last_step: int | None = None
        #: the W&B run's id: the option, a resumed run's saved id, else a new one (decided here, not in
        #: on_run_start, so a checkpoint taken while the backend's thread starts already holds it)
        self.run_id: str = self.options.id or _new_run_id()
        self._resumed = False

    # -- resumable state: the W&B run id ------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"version": 1, "run_id": self.run_id}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != 1:
            raise ValueError(f"wandb backend: unsupported saved state version {state.get('version')!r} (expected 1)")
        saved = str(state["run_id"])
        if self.options.id and self.options.id != saved:
            log.warning(f"wandb backend: the option id={self.options.id!r} wins over the checkpoint's W&B run "
                        f"id {saved!r}; the resumed steps go to W&B run {self.options.id!r}", plugin="wandb")
        else:
            self.run_id = saved
        self._resumed = True

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        o = self.options
        d = Path(o.dir) if o.dir else Path(run.run_dir)
        if not d.is_absolute():
            d = Path(run.run_dir) / d
        # wandb writes under <dir>/wandb; claimed before its library loads, which also refuses a link planted in
        # a resumed run's directory (never written through)
        claim_output(d / "wandb")
        claim_output(d)

        import wandb  # heavy: only when a run uses it

        d.mkdir(parents=True, exist_ok=True)
        resume = o.resume or ("allow" if self._resumed else None)
        kwargs: dict[str, Any] = dict(
            id=self.run_id, resume=resume,
            project=o.project, entity=o.entity, name=o.run_name or run.name, dir=str(d),
            tags=list(o.tags) or None, group=o.group, job_type=o.job_type, notes=o.notes,
            config=json_safe(run.redacted_config()) if o.log_config else None,
        )
        if o.mode is not None:
            kwargs["mode"] = o.mode
        if o.settings:
            kwargs["settings"] = wandb.Settings(**o.settings)
        init_params = inspect.signature(wandb.init).parameters
        if "reinit" in init_params:
            # several rlhooks runs in one process (tests, sweeps) each get their own W&B run
            kwargs["reinit"] = "create_new" if _supports_create_new(wandb) else True
        self._wandb = wandb
        self.run = wandb.init(**{k: v for k, v in kwargs.items() if v is not None})
        self._incremental = o.table_mode == "incremental" and "log_mode" in inspect.signature(wandb.Table).parameters
        # every metric against the training step: one x axis for all charts and run comparisons
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)
        if o.table_mode == "incremental" and not self._incremental:
            log.warning(
                "this wandb version has no incremental tables; logging a new table per step instead",
                plugin="wandb", wandb_version=getattr(wandb, "__version__", "?"),
            )

    @hookimpl
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self.run is None:
            raise RuntimeError("wandb backend: log_metrics before on_run_start (no W&B run yet)")
        data = {k: n for k, v in metrics.items() if (n := to_number(v)) is not None}
        data[STEP_METRIC] = int(step)
        self.run.log(data, step=int(step))
        self._last_step = int(step)
        if self.options.charts:
            self._keep_chart_values(int(step), data)
            every = self.options.chart_every
            if every and step % every == 0:
                self._log_charts(int(step))

    def _keep_chart_values(self, step: int, data: Mapping[str, float]) -> None:
        for k, v in data.items():
            chart = self._chart_of.get(k, "")
            if chart == "":
                chart = self._chart_of[k] = next((n for n, rx in _CHART_RX.items() if rx.search(k)), None)
            if chart is None or not isinstance(v, (int, float)) or v != v:
                continue
            series = self._chart_data.get(k)
            if series is None:
                series = self._chart_data[k] = _ChartSeries(self.options.chart_points)
            series.add(step, float(v))

    def chart_series(self) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
        """Chart name -> metric key -> (steps, values) kept so far."""
        out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
        for k, series in sorted(self._chart_data.items()):
            out.setdefault(self._chart_of[k], {})[k] = series.points()  # type: ignore[index]
        return out

    def _log_charts(self, step: int) -> None:
        wandb = self._wandb
        charts = {}
        for name, series in self.chart_series().items():
            keys = list(series)
            charts[f"charts/{name}"] = wandb.plot.line_series(
                xs=[series[k][0] for k in keys], ys=[series[k][1] for k in keys], keys=keys,
                title=CHARTS[name][0], xname=STEP_METRIC,
            )
        if charts:
            self.run.log(charts, step=step)

    def _row(self, state: _TableState, name: str, row: Mapping[str, Any]) -> list[Any]:
        extra = {k: v for k, v in row.items() if k not in state.columns}
        if extra:
            new = set(extra) - state.warned
            if new:
                state.warned |= new
                log.warning(
                    f"wandb table {name!r}: row keys {sorted(new)} are not columns of this table "
                    f"(columns are fixed by its first rows); their values are kept as JSON in {EXTRA_COLUMN!r}",
                    plugin="wandb", table=name,
                )
        values = [plain(row.get(c)) for c in state.columns]
        values.append(json.dumps(json_safe(extra), ensure_ascii=False) if extra else None)
        return values

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        if self.run is None:
            raise RuntimeError("wandb backend: log_table before on_run_start (no W&B run yet)")
        wandb = self._wandb
        state = self._tables.get(name)
        if state is None:
            state = self._tables[name] = _TableState([c for c in columns_of(rows) if c != EXTRA_COLUMN])
        data = [self._row(state, name, r) for r in rows]
        cols = [*state.columns, EXTRA_COLUMN]
        if self._incremental:
            if state.table is not None and state.rows + len(data) > self.options.max_incremental_rows:
                state.table, state.rows = None, 0  # bounded memory: continue in a fresh table
            if state.table is None:
                state.table = wandb.Table(columns=cols, log_mode="INCREMENTAL", allow_mixed_types=True)
            state.rows += len(data)
            for values in data:
                state.table.add_data(*values)
            table = state.table
        else:
            table = wandb.Table(columns=cols, data=data, allow_mixed_types=True)
        self.run.log({name: table, STEP_METRIC: int(step)}, step=int(step))

    @hookimpl
    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        if not self.options.histograms or self.run is None:
            return
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        if v.size:
            try:
                hist = self._wandb.Histogram(v)
            except ValueError:  # numpy cannot make 64 distinct bin edges (a tiny or overflowing range)
                hist = self._wandb.Histogram(np_histogram=([int(v.size)], [float(v.min()), float(v.max())]))
            self.run.log({name: hist, STEP_METRIC: int(step)}, step=int(step))

    @hookimpl
    def on_run_end(self, status: str) -> None:
        if self.run is not None:
            if self.options.charts and self._last_step is not None:
                try:
                    self._log_charts(self._last_step)
                except Exception as exc:  # noqa: BLE001 - a chart must not lose the run's finish
                    log.warning("wandb custom charts could not be logged", plugin="wandb", error=f"{type(exc).__name__}: {exc}")
            self.run.finish(exit_code=0 if status in ("success", "stopped") else 1)  # a requested stop is clean
            self.run = None


def _new_run_id() -> str:
    """A W&B-style run id (8 lowercase letters and digits, as ``wandb.util.generate_id``), without importing wandb."""
    import secrets
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def _supports_create_new(wandb: Any) -> bool:
    try:
        major, minor = (int(x) for x in wandb.__version__.split(".")[:2])
    except (AttributeError, ValueError):
        return False
    return (major, minor) >= (0, 19)
