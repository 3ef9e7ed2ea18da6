"""The pre-generation stage: prompt filters drop sampled prompts before anything is generated.

Runs inside ``StepDriver.collect`` for every generation batch, the same in every engine::

    sampler batch -> prompt batch + learning/* columns -> prompt filters (AND of keep masks)
    -> not enough kept? draw another sampler batch (up to run.max_prompt_draws draws)
    -> the generation batch: the first kept prompts up to the configured size; if the draws ran
       out, the rest is filled with skipped prompts, in draw order ("forced")

So a generation batch always has its configured size (verl's divisibility of the generation
batch by the rollout world size and ``n`` holds as it does without the stage), or with
``run.gen_batch_sizing: adaptive`` the size ``adaptive_size`` gives (a multiple of the engine's
``prompt_multiple``). Kept prompts past
the size ("surplus") are not generated; like skipped prompts they were consumed from the
sampler's epoch. Metrics (summed over the step's generation batches):

    prompt_filter/sampled             prompts drawn from the sampler
    prompt_filter/skipped             prompts the filters dropped
    prompt_filter/forced              skipped prompts generated anyway to fill the batch
    prompt_filter/surplus             kept prompts beyond the batch size (not generated)
    prompt_filter/draws               sampler batches drawn
    prompt_filter/skip_ratio          skipped / sampled
    prompt_filter/saved_trajectories  (skipped - forced) * n: what the skipped prompts would have
                                      cost (an upper bound: other prompts take their place, so the
                                      realized saving is fewer generation batches per step)
    prompt_filter/saved_trajectories_total, prompt_filter/skipped_total   over the whole run
    source/<name>/prompts_skipped, source/<name>/trajectories_saved       per source
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlhooks.core.batch import DATA_SOURCE, INDEX, Batch, factorize
from rlhooks.core.errors import RLHooksError


def adaptive_size(configured: int, needed_groups: int, kept_groups: int, generated_groups: int, multiple: int = 1) -> int:
    """GRESO's adaptive generation-batch size for a step's next generation batch.

    ``needed / kept ratio so far * 1.25`` prompts, at least ``configured / 6`` (GRESO: 64 of 384),
    at most ``configured``, rounded up to a multiple of ``multiple`` (verl: the prompts whose ``n``
    responses split evenly over the rollout workers).
    """
    ratio = kept_groups / generated_groups if generated_groups else 1.0
    want = configured if ratio <= 0 else int(np.ceil(needed_groups / ratio * 1.25))
    want = max(min(want, configured), int(np.ceil(configured / 6)), 1)
    multiple = max(int(multiple), 1)
    want = int(np.ceil(want / multiple) * multiple)
    return min(want, configured)


class PromptStage:
    """Applies the manager's prompt filters to sampled prompt batches; keeps the step's counts."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.step_metrics: dict[str, float] = {}
        self.skipped_total = 0
        self.saved_total = 0

    @property
    def active(self) -> bool:
        return bool(self.manager.prompt_filters)

    def begin_step(self) -> None:
        self.step_metrics = {}

    def _add(self, key: str, value: float) -> None:
        self.step_metrics[key] = self.step_metrics.get(key, 0.0) + float(value)

    def select(self, step: int, generation: int, rollout: Any, payload: Any, prompts: Batch,
               want: int | None = None) -> tuple[Any, Batch]:
        """The generation batch to generate: filtered, topped up from the sampler, of ``want`` prompts
        (default: the sampled size)."""
        m = self.manager
        want = len(prompts) if want is None else min(int(want), len(prompts))
        if not self.active:  # adaptive sizing only: the first ``want`` prompts
            if want < len(prompts):
                self._add("prompt_filter/surplus", len(prompts) - want)
                rows = np.arange(want)
                select = getattr(rollout, "select_prompts", None) or rollout.select
                return select(payload, rows), prompts.select(rows)
            return payload, prompts
        if m.learning is None:  # else the filter would blame its own config section
            names = ", ".join(f"{rec.name!r} at {rec.path}" for rec, _ in m.prompt_filters)
            raise RLHooksError(
                f"prompt filters ({names}) need the run's prompt-level learning state, which the engine "
                f"({type(rollout).__name__}) did not attach: call manager.attach_data(DatasetColumns) before "
                f"the first step (RunManager.build_sampler does it for an engine that builds its sampler)"
            )
        max_draws = m.config.run.max_prompt_draws
        n = int(prompts.meta.get("n", m.config.run.n))
        parts: list[tuple[Any, Batch, np.ndarray]] = []
        kept = 0
        draw = 0
        while True:
            draw += 1
            view = prompts.with_meta(step=step, generation=generation, draw=draw)
            if m.learning is not None and INDEX in prompts and len(prompts):
                view = view.with_columns(**m.learning.columns(prompts[INDEX]))
            keep, metrics = m.apply_filters(view, m.prompt_filters)
            for k, v in metrics.items():
                self._add(k, v)
            parts.append((payload, prompts, keep))
            kept += int(np.count_nonzero(keep))
            if kept >= want or draw >= max_draws:
                break
            payload, prompts = rollout.sample(step)
            prompts = prompts.with_meta(step=step)

        # kept prompts in draw order first, then skipped ones if the draws ran out
        need = want
        take: list[np.ndarray] = []
        for _, b, keep in parts:
            rows = np.flatnonzero(keep)[:need]
            take.append(rows)
            need -= len(rows)
        forced = need
        for i, (_, b, keep) in enumerate(parts):
            if need <= 0:
                break
            extra = np.flatnonzero(~keep)[:need]
            take[i] = np.sort(np.concatenate([take[i], extra]))
            need -= len(extra)

        sampled = sum(len(b) for _, b, _ in parts)
        skipped = sum(int(np.count_nonzero(~k)) for _, _, k in parts)
        surplus = kept - min(kept, want)
        saved = (skipped - forced) * n
        self._add("prompt_filter/sampled", sampled)
        self._add("prompt_filter/skipped", skipped)
        self._add("prompt_filter/forced", forced)
        self._add("prompt_filter/surplus", surplus)
        self._add("prompt_filter/draws", draw)
        self._add("prompt_filter/saved_trajectories", saved)
        self.skipped_total += skipped
        self.saved_total += saved
        self._per_source(parts, take, n)

        select: Callable[[Any, np.ndarray], Any] = getattr(rollout, "select_prompts", None) or rollout.select
        payloads, batches = [], []
        for (p, b, _), rows in zip(parts, take):
            if len(rows) == 0:
                continue
            full = len(rows) == len(b)
            payloads.append(p if full else select(p, rows))
            batches.append(b if full else b.select(rows))
        if len(payloads) == 1:
            return payloads[0], batches[0]
        return rollout.concat(payloads), Batch.concat(batches, meta=dict(batches[0].meta))

    def _per_source(self, parts: list[tuple[Any, Batch, np.ndarray]], take: list[np.ndarray], n: int) -> None:
        """Per source: prompts skipped, and trajectories saved (skipped and not forced back in); the draws' rows
        counted together (one factorize a step, not one a draw: a filter that skips most prompts draws often)."""
        sources, skipped_rows, saved_rows = [], [], []
        for (_, b, keep), rows in zip(parts, take):
            if DATA_SOURCE not in b or not len(b):
                continue
            not_generated = ~keep
            not_generated[rows] = False  # forced rows were generated after all
            sources.append(np.asarray(b[DATA_SOURCE]))
            skipped_rows.append(~keep)
            saved_rows.append(not_generated)
        if not sources:
            return
        names, codes = factorize(np.concatenate(sources) if len(sources) > 1 else sources[0])
        skipped = np.bincount(codes, weights=np.concatenate(skipped_rows), minlength=len(names))
        saved = np.bincount(codes, weights=np.concatenate(saved_rows), minlength=len(names)) * n
        for name, s, v in zip(names.tolist(), skipped.tolist(), saved.tolist()):
            self._add(f"source/{name}/prompts_skipped", s)
            self._add(f"source/{name}/trajectories_saved", v)

    def metrics(self) -> dict[str, float]:
        out = dict(self.step_metrics)
        if not self.active:
            return {k: v for k, v in out.items() if k == "prompt_filter/surplus"}
        if out.get("prompt_filter/sampled"):
            out["prompt_filter/skip_ratio"] = out["prompt_filter/skipped"] / out["prompt_filter/sampled"]
        out["prompt_filter/skipped_total"] = float(self.skipped_total)
        out["prompt_filter/saved_trajectories_total"] = float(self.saved_total)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"skipped_total": self.skipped_total, "saved_total": self.saved_total}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.skipped_total = int(state.get("skipped_total", 0))
        self.saved_total = int(state.get("saved_total", 0))
