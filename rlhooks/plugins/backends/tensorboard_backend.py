"""TensorBoardBackend: event files written with ``torch.utils.tensorboard.SummaryWriter``.

* metrics -> scalars (tag = metric name, step = the training step); one event per step holds
  all of the step's scalars;
* histograms -> TensorBoard histograms;
* tables -> markdown text (tag ``<table name>/text_summary`` in the event file, shown in the
  Text tab under the table name); long cells cut to ``max_text`` characters;
* a custom-scalars layout (Custom Scalars tab, ``LAYOUT``): the reward_monitoring document's
  categories (Reward Signals: total, per-function and quality; Training Dynamics: policy metrics
  and advantages; Contributions) plus Alerts, source (per-source rewards, counts, sampler
  weights), filter and curriculum.

A resumed run does not draw a second curve over the steps it repeats: ``on_load_checkpoint``
(step K) makes the writer start with ``purge_step=K+1``, TensorBoard's marker that drops the earlier
run's events from step K+1 on (those written after the checkpoint, before the run stopped).

``torch.utils.tensorboard`` is imported in ``on_run_start`` only, so loading the entry point is cheap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks import claim_output, hookimpl
from rlhooks.plugins.backends._common import DispatchOptions, columns_of, non_negative, plain, positive, to_number, truncate

log = structlog.get_logger("rlhooks.backends")

DEFAULT_DIR = "tensorboard"

#: Custom Scalars tab: category -> chart title -> ["Multiline", [tag regexes]]. The first three
#: categories are the reward_monitoring document's; the rest are rlhooks' own. Regexes run in the
#: browser (JavaScript syntax) and must match keys the plugins really log (tests check this against
#: a simulated run). Per-source names may contain '/', so source charts match ``.+``, not ``[^/]+``.
LAYOUT: dict[str, dict[str, list[Any]]] = {
    "Reward Signals": {
        "Total Rewards (mean, total, min, max)": ["Multiline", [r"^rewards/(mean|total|min|max)$"]],
        "Per-Function Rewards": ["Multiline", [r"^rewards/functions/(?!.*_std$)"]],
        "Per-Function Reward Std": ["Multiline", [r"^rewards/functions/.*_std$"]],
        "Quality Metrics (SNR, entropy, variance)": ["Multiline", [r"^rewards/(signal_to_noise|entropy|variance)$"]],
    },
    "Training Dynamics": {
        "Policy Metrics (KL, entropy)": ["Multiline", [r"^training/(kl_divergence|policy_update_kl|policy_entropy)$"]],
        "Advantages (mean, std)": ["Multiline", [r"^training/advantage_(mean|std)$"]],
    },
    "Contributions": {
        "Reward Contributions (%) by function": ["Multiline", [r"^contributions/"]],
    },
    "Alerts": {
        "alerts per step by level": ["Multiline", [r"^alerts/(info|warning|critical)$"]],
        "alerts in the run": ["Multiline", [r"^alerts/total$"]],
    },
    "source": {
        "reward by source (trained)": ["Multiline", [r"^source/.+/reward$"]],
        "reward by source (generated)": ["Multiline", [r"^source/.+/generated_reward$"]],
        "count by source": ["Multiline", [r"^source/.+/count$"]],
        "weight by source": ["Multiline", [r"^sampler/weight/"]],
        "sampler reward EMA by source": ["Multiline", [r"^sampler/reward_ema/"]],
    },
    "filter": {
        "groups": ["Multiline", [r"^filter/.*groups$"]],
        "kept ratio and generation batches": ["Multiline", [r"^filter/kept_ratio$", r"^train/num_gen_batches$"]],
    },
    "curriculum": {
        "level": ["Multiline", [r"^curriculum/level$"]],
        "percentile": ["Multiline", [r"^curriculum/percentile$"]],
        "reward EMA": ["Multiline", [r"^curriculum/reward_ema$"]],
    },
}


def _md_cell(value: Any, limit: int) -> str:
    v = plain(value)
    if v is None:
        return ""
    if isinstance(v, float):
        text = repr(v) if math.isfinite(v) else str(v)
    else:
        text = str(v)
    text = truncate(text, limit)
    # a cell must stay on one line and must not close the cell early
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")


def markdown_table(rows: list[dict[str, Any]], limit: int) -> str:
    """Rows as a markdown table; columns are the union of the rows' keys, missing cells empty."""
    if not rows:
        return "*(no rows)*"
    cols = columns_of(rows)
    lines = [
        "| " + " | ".join(_md_cell(c, 0) for c in cols) + " |",  # headers are never cut
        "|" + "---|" * len(cols),
    ]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(row.get(c), limit) for c in cols) + " |")
    return "\n".join(lines)


#: the SummaryWriter's event file names
EVENT_FILES = "events.out.tfevents.*"


class TensorBoardBackend:
    """Scalars, histograms and text tables in TensorBoard event files under ``<run_dir>/tensorboard``."""

    @attrs.frozen(kw_only=True)
    class Options(DispatchOptions):
        #: event-file directory; relative paths are under the run directory
        log_dir: str = DEFAULT_DIR
        #: seconds between the writer's flushes to disk (everything is flushed at run end)
        flush_secs: int = attrs.field(default=30, validator=positive)
        #: events the writer buffers before writing
        max_queue: int = attrs.field(default=100, validator=positive)
        #: write histograms sent with log_histogram
        histograms: bool = True
        #: write tables as markdown text
        tables: bool = True
        #: longest text in a table cell before it is cut (0 = no limit)
        max_text: int = attrs.field(default=1000, validator=non_negative)
        #: write the custom-scalars layout (LAYOUT: Reward Signals, Training Dynamics, Contributions, Alerts, source, filter, curriculum)
        layout: bool = True

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self.writer: Any = None
        self.log_dir: Path | None = None
        self._existing: set[Path] = set()  # event files in log_dir before our writer started
        self._summary_cls: Any = None
        #: the first step of a resumed run (on_load_checkpoint): earlier events from it on are purged
        self._purge_step: int | None = None

    def _ensure_writer(self, run_dir: Path | None = None) -> Any:
        if self.writer is None:
            if self.log_dir is None or run_dir is not None:  # decided once per run, at on_run_start
                d = Path(self.options.log_dir)
                if not d.is_absolute():
                    d = (run_dir if run_dir is not None else Path.cwd()) / d
                claim_output(d)  # also refuses a link planted in a resumed run's directory: never written through
                d.mkdir(parents=True, exist_ok=True)
                self.log_dir = d
                self._existing = set(d.glob(EVENT_FILES))
            from torch.utils.tensorboard import SummaryWriter  # heavy: only when a run uses it

            try:
                from tensorboard.compat.proto.summary_pb2 import Summary

                self._summary_cls = Summary
            except ImportError:  # pragma: no cover - torch's writer needs tensorboard anyway
                self._summary_cls = None
            # a writer that failed to start (a full disk) is retried in the same directory, never elsewhere
            self.writer = SummaryWriter(log_dir=str(self.log_dir), max_queue=self.options.max_queue,
                                        flush_secs=self.options.flush_secs, purge_step=self._purge_step)
            self._purge_step = None  # once: a writer restarted later in this run purges nothing
        return self.writer

    @hookimpl
    def on_load_checkpoint(self, step: int) -> None:
        """A resumed run: its steps start at ``step + 1``; the earlier run's events from there are purged."""
        self._purge_step = int(step) + 1

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        w = self._ensure_writer(run.run_dir)
        if self.options.layout:
            w.add_custom_scalars(LAYOUT)

    @hookimpl
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> None:
        w = self._ensure_writer()
        values = [(k, float(n)) for k, v in metrics.items() if (n := to_number(v)) is not None]
        file_writer = getattr(w, "_get_file_writer", None)
        if self._summary_cls is not None and file_writer is not None:
            # one event per step with every scalar: ~20x cheaper than add_scalar per metric
            S = self._summary_cls
            summary = S(value=[S.Value(tag=k, simple_value=v) for k, v in values])
            file_writer().add_summary(summary, int(step))
        else:  # pragma: no cover - older torch
            for k, v in values:
                w.add_scalar(k, v, global_step=int(step))

    @hookimpl
    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        if not self.options.histograms:
            return
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        if v.size == 0:
            return  # TensorBoard cannot bin an empty histogram
        w = self._ensure_writer()
        try:
            w.add_histogram(name, v, global_step=int(step))
        except ValueError:  # binning overflows near the float64 limit (|x| ~ 1e308): one bucket instead
            with np.errstate(over="ignore"):
                w.add_histogram_raw(name, min=float(v.min()), max=float(v.max()), num=int(v.size), sum=float(v.sum()),
                                    sum_squares=float(np.square(v).sum()), bucket_limits=[float(v.max())],
                                    bucket_counts=[int(v.size)], global_step=int(step))

    @hookimpl
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        if not self.options.tables:
            return
        self._ensure_writer().add_text(name, markdown_table(rows, self.options.max_text), global_step=int(step))

    @hookimpl
    def on_run_end(self, status: str) -> None:
        try:
            if self.writer is not None:
                self.writer.flush()
                self.writer.close()
        finally:
            self.writer = None
            self._remove_empty_event_files()  # also when the writer failed in its constructor

    def _remove_empty_event_files(self) -> None:
        """An event file of ours that never got a byte (the disk filled before its header): removed,
        so a run leaves no 0-byte file. Files that were there before this writer are not touched."""
        if self.log_dir is None:
            return
        for f in set(self.log_dir.glob(EVENT_FILES)) - self._existing:
            try:
                if f.stat().st_size == 0:
                    f.unlink()
            except OSError:
                pass
