"""Data, tokenizer, sampler and recorder shared by the verl tests of both trainers (CPU, no Ray, no model).

The legacy trainer's worker stand-ins are in ``legacy/legacy_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import rlhooks
from rlhooks import Sampler

SOURCES = ("easy", "hard", "mixed")  # easy: all right, hard: all wrong, mixed: half right
WORDS = ["<pad>", "<eos>", "<unk>", "what", "is", "plus", "the", "answer", "easy", "hard", "mixed",
         *[str(i) for i in range(40)]]
PROMPT_LEN, RESPONSE_LEN = 8, 6


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def write_dataset(path: Path, rows: int) -> Path:
    """A parquet file in verl's RL format; data_source cycles easy, hard, mixed."""
    src = [SOURCES[i % 3] for i in range(rows)]
    table = pa.table({
        "data_source": src,
        "prompt": [[{"role": "user", "content": f"{s} what is {i % 20} plus 1"}] for i, s in enumerate(src)],
        "ability": ["math"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": str(i % 20 + 1)} for i in range(rows)],
        "extra_info": [{"index": 1000 + i, "complexity_score": float(i % 3)} for i in range(rows)],
    })
    pq.write_table(table, path)
    return path


class StepSampler(Sampler):
    """A deterministic, resumable, reward-aware test sampler (epoch permutations from the seed).

    State: the epoch, the position inside it and the rewards seen so far, so a resumed run
    draws exactly what the uninterrupted run draws.
    """

    def __init__(self, options, data, *, batch_size, seed=0):
        super().__init__(options, data, batch_size=batch_size, seed=seed)
        self.epoch, self.pos, self.reward_sum, self.reward_rows = 0, 0, 0.0, 0

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.data))

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        while self.pos < len(order):
            self.pos += 1
            yield int(order[self.pos - 1])
        self.epoch, self.pos = self.epoch + 1, 0

    def __len__(self) -> int:
        return len(self.data)

    @rlhooks.hookimpl
    def on_rewards_computed(self, batch):
        self.reward_sum += float(batch["reward"].sum())
        self.reward_rows += len(batch)
        return {"sampler/reward_rows": self.reward_rows}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "reward_sum": self.reward_sum, "reward_rows": self.reward_rows}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self.reward_sum, self.reward_rows = float(state["reward_sum"]), int(state["reward_rows"])


class Recorder:
    """Records every hook call with its arguments; returns per-source metrics like a plugin would."""

    def __init__(self):
        self.events: list[tuple] = []
        self.logged: dict[int, dict[str, float]] = {}

    @rlhooks.hookimpl
    def on_run_start(self, run):
        self.events.append(("on_run_start",))

    @rlhooks.hookimpl
    def on_batch_sampled(self, step, batch):
        self.events.append(("on_batch_sampled", step, batch.meta["generation"], batch["index"].tolist(),
                            batch["data_source"].tolist(), batch["prompt"].tolist()))

    @rlhooks.hookimpl
    def on_rewards_computed(self, step, batch):
        self.events.append(("on_rewards_computed", step, batch.meta["generation"], len(batch), batch.materialized))
        src = batch["data_source"].astype(str)
        return {f"source/{s}/reward": float(batch["reward"][src == s].mean()) for s in np.unique(src)}

    @rlhooks.hookimpl
    def on_step_end(self, step, batch, metrics):
        self.events.append(("on_step_end", step, len(batch), batch["advantage"].copy(), batch["uid"].copy(),
                            batch["acc"].copy(), dict(metrics)))
        return {"test/trained_rows": len(batch)}

    @rlhooks.hookimpl
    def log_metrics(self, step, metrics):
        self.events.append(("log_metrics", step))
        self.logged[step] = dict(metrics)

    @rlhooks.hookimpl
    def on_run_end(self, status):
        self.events.append(("on_run_end", status))

    def of(self, name: str) -> list[tuple]:
        return [e for e in self.events if e[0] == name]


class Validations(Recorder):
    def __init__(self, stop_at=None):
        super().__init__()
        self.stop_at, self.run = stop_at, None

    @rlhooks.hookimpl
    def on_run_start(self, run):
        self.run = run
        super().on_run_start(run)

    @rlhooks.hookimpl
    def on_validation_end(self, step, metrics, per_source):
        self.events.append(("on_validation_end", step, dict(metrics), {s: dict(m) for s, m in per_source.items()}))
        return {"held_out/sources": len(per_source)}

    @rlhooks.hookimpl
    def on_step_end(self, step, batch, metrics):
        out = super().on_step_end(step, batch, metrics)
        if step == self.stop_at:
            self.run.request_stop(f"stop at {step}")
        return out

    @rlhooks.hookimpl
    def on_save_checkpoint(self, step, checkpoint_dir):
        self.events.append(("on_save_checkpoint", step, checkpoint_dir))
        (checkpoint_dir / "validations.txt").write_text(str(len(self.of("on_validation_end"))))  # its own file

    @rlhooks.hookimpl
    def on_load_checkpoint(self, step, checkpoint_dir):
        self.events.append(("on_load_checkpoint", step, checkpoint_dir))


def set_verls_checkpoint_callback(trainer, cfg) -> None:
    """What verl's V1 ``PPOTrainer.__init__`` sets as ``checkpoint_callback`` on a trainer built by hand: verl
    0.9.1 builds one; verl main has none and sets nothing (rlhooks reads it with getattr)."""
    try:
        from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
    except ImportError:  # verl main
        return
    trainer.checkpoint_callback = build_checkpoint_callback(cfg)
