"""rlhooks on verl's V1 trainer at production shapes, against verl's own replay buffer, on a real TransferQueue.

    python -m benchmarks.bench_v1_scale            # every size; writes benchmarks/V1_SCALE.json, docs/img/v1_scale.png
    python -m benchmarks.bench_v1_scale --quick    # 64 trajectories x 512 tokens (make bench-quick)

One child process (its own local Ray: TransferQueue's controller and storage are Ray actors) puts synthetic
trajectories into TransferQueue with the fields and tags V1's agent loop writes (``AgentLoopWorkerTQ.
_agent_loop_postprocess``: token ids, ``rm_scores`` with the score at the last token, ``advantages``,
``extra_fields.reward_extra_info`` as the rlhooks adapter returns it, the dataset's fields), groups of 16,
then per size, side by side on the same data:

* **verl**: verl's built-in ``ReplayBuffer`` judging the finished groups with its own DAPO filter
  (``filter_groups_metric="acc"``, what the example config's ``filters: [{name: dapo, metric: acc}]`` is in
  verl's terms): ``_dapo_filtered_keys``, the call rlhooks overrides.
* **rlhooks**: ``RLHooksReplayBuffer._dapo_filtered_keys`` with the example config's plugins (examples/configs/
  verl_cpu_tiny.yaml: dapo on acc, source_metrics, reward_monitor, a top/bottom-k table every 10 steps; the
  jsonl backend), then the step's end (``_trained_batch`` + ``on_step_end`` + backends + the table) on the
  trained rows (every group, as at the issue's shapes: train_batch_size prompts x 16), at step 10 (a table step).
* **rlhooks before**: the same code reading every field up front, as rlhooks did before issue 40.

Per size: seconds (median of repeats), bytes read from TransferQueue (tensors' bytes + pickled non-tensor values,
as returned), and the trainer process's peak RSS above its RSS before the call (``VmHWM`` reset through
``/proc/self/clear_refs``). The rlhooks trainer is ``RLHooksPPOTrainerSync`` without verl's workers (the hooks'
path only: what runs in the trainer process around verl's ``sample()`` and ``_compute_metrics``).

Bytes a step: the table reads the text (token ids) of the rows it shows, on the steps it logs, which verl's
buffer never reads; rlhooks's judging is also measured once at a step without the table, and a step's bytes
are the mean over the table's period of 10 (one table step, nine without; the step end reads nothing on either).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import Result

HERE = Path(__file__).parent
REPO = HERE.parent
N = 16  # responses per prompt
PROMPT_TOKENS = 256
STEP = 10  # the example's top/bottom-k table logs every 10 steps: a step that logs it
EVERY = 10  # its ``every``: the bytes of a step are the mean over one such period (one table step, nine others)
SIZES = ((64, 512), (8192, 512), (16384, 512), (8192, 4096), (16384, 4096), (8192, 8192), (16384, 8192))
QUICK = ((64, 512),)
#: sizes at which the "before" variant (every field read, token ids padded) is also run (memory on this machine)
BEFORE_MAX_TOKENS = 16384 * 4096
FUNCTIONS = ("format_exact", "format_approx", "check_answer", "check_numbers")
SOURCES = tuple(f"source_{i}" for i in range(8))


# -- the child: data, buffers, measurements ------------------------------------------------------------------
def _td_bytes(td: Any) -> int:
    """Bytes of what a kv_batch_get returned: tensors' storage, non-tensor values pickled."""
    import torch

    total = 0
    for key in td.keys():
        value = td.get(key)
        if isinstance(value, torch.Tensor):
            flat = value.values() if value.is_nested else value
            total += flat.numel() * flat.element_size()
        else:
            items = value.tolist() if hasattr(value, "tolist") else list(value)
            total += len(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))
    return total


class ReadCounter:
    """Counts the bytes every ``tq.kv_batch_get`` returns (verl's buffer and rlhooks call it the same way)."""

    def __init__(self) -> None:
        import transfer_queue as tq

        self.tq, self.real, self.bytes, self.calls, self.overhead_s = tq, tq.kv_batch_get, 0, 0, 0.0
        tq.kv_batch_get = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.real(*args, **kwargs)
        t0 = time.perf_counter()
        self.bytes += _td_bytes(out)  # its own time is taken out of the measured call's (measure)
        self.calls += 1
        self.overhead_s += time.perf_counter() - t0
        return out


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def measure(fn: Any, counter: ReadCounter, reset: Any, repeat: int) -> dict[str, float]:
    """Median seconds of ``fn()`` (``reset()`` before each, untimed), bytes read and peak RSS of one call."""
    import gc

    times, reads, peaks = [], [], []
    for _ in range(repeat):
        reset()
        gc.collect()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        except OSError:
            pass
        before, b0, o0 = _rss("VmRSS"), counter.bytes, counter.overhead_s
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0 - (counter.overhead_s - o0))  # less the byte counting
        reads.append(counter.bytes - b0)
        peaks.append(max(_rss("VmHWM") - before, 0))
    return {"s": statistics.median(times), "bytes": reads[-1], "peak": max(peaks)}


def measure_interleaved(cases: dict[str, tuple[Any, Any]], counter: ReadCounter, repeat: int) -> dict[str, dict]:
    """``measure`` of several ``name: (fn, reset)`` taking turns: each repeat runs every case once, in order, so
    a change of the machine's load falls on all of them."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, (fn, reset) in cases.items():
            runs[name].append(measure(fn, counter, reset, 1))
    return {name: {"s": statistics.median(r["s"] for r in got), "bytes": got[-1]["bytes"],
                   "peak": max(r["peak"] for r in got)} for name, got in runs.items()}


def put_trajectories(count: int, tokens: int, vocab: tuple[int, int], seed: int) -> tuple[list[str], list[dict]]:
    """``count`` trajectories (groups of N) into TransferQueue as V1's agent loop writes them; response lengths
    uniform in [tokens/2, tokens]. Returns the trajectory keys and their tags."""
    import numpy as np
    import torch
    import transfer_queue as tq
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from rlhooks.engines.verl.v1.trainer import prompt_uid

    rng = np.random.default_rng(seed)
    groups = count // N
    keys_all, tags_all = [], []
    chunk = max(1, 512 // N)  # groups per put: bounds this process's memory
    for g0 in range(0, groups, chunk):
        keys, fields, tags, uids = [], [], [], []
        for g in range(g0, min(groups, g0 + chunk)):
            uid = prompt_uid(seed * 10**6 + g)
            uids.append(uid)
            kind = rng.random()  # a quarter all wrong, a quarter all right, half mixed: DAPO drops about half
            p = 0.0 if kind < 0.25 else 1.0 if kind < 0.5 else rng.uniform(0.2, 0.8)
            acc = (rng.random(N) < p).astype(float)
            source = SOURCES[g % len(SOURCES)]
            prompt = torch.as_tensor(rng.integers(*vocab, PROMPT_TOKENS), dtype=torch.int64)
            for s in range(N):
                length = int(rng.integers(tokens // 2, tokens + 1))
                parts = {name: float(rng.random() < 0.9) for name in FUNCTIONS[:2]}
                parts.update(check_answer=2.0 * acc[s], check_numbers=0.5 * acc[s])
                score = sum(parts.values())
                rm = torch.zeros(length, dtype=torch.float32)
                rm[-1] = score
                info = {"score": score, **parts, "acc": acc[s], "reward_errors": 0.0,
                        **{f"reward_errors/{name}": 0.0 for name in FUNCTIONS}}
                keys.append(f"{uid}_{s}_0")
                fields.append({
                    "uid": uid, "data_source": source, "rlhooks_row": g, "prompts": prompt,
                    "responses": torch.as_tensor(rng.integers(*vocab, length), dtype=torch.int64),
                    "rm_scores": rm, "advantages": torch.full((length,), float(acc[s] - acc.mean()), dtype=torch.float32),
                    "extra_fields": {"reward_extra_info": info, "min_global_steps": STEP - 1, "max_global_steps": STEP - 1},
                    "reward_model": {"style": "rule", "ground_truth": str(g % 97)},
                    "extra_info": {"index": g, "complexity_score": float(g % 5) / 4}, "session_id": s, "num_turns": 2,
                })
                tags.append({"status": "success", "prompt_len": PROMPT_TOKENS, "response_len": length,
                             "seq_len": PROMPT_TOKENS + length, "global_steps": STEP,
                             "min_global_steps": STEP - 1, "max_global_steps": STEP - 1})
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "running", "global_steps": STEP} for _ in uids])
        tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "finished", "global_steps": STEP} for _ in uids])
        keys_all += keys
        tags_all += tags
        del fields
    return keys_all, tags_all


def example_config(out_dir: Path) -> Any:
    """The rlhooks sections of examples/configs/verl_cpu_tiny.yaml (its plugins), logging to jsonl only."""
    import yaml

    from rlhooks.host import load_config

    raw = yaml.safe_load((REPO / "examples" / "configs" / "verl_cpu_tiny.yaml").read_text())
    raw.pop("verl")
    raw["run"] = {"name": "v1-scale", "out_dir": str(out_dir)}
    raw["backends"] = ["jsonl"]  # console would print every step into the benchmark's output
    return load_config(raw)


def rlhooks_trainer(out_dir: Path, tokenizer: Any) -> Any:
    """``RLHooksPPOTrainerSync`` with what its hooks' path uses, set as ``_init_dataloader`` and
    ``on_step_begin`` set it (no verl workers, dataloader nor config: they are not on this path)."""
    from rlhooks.core.driver import StepDriver
    from rlhooks.host import RunManager
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    trainer = RLHooksPPOTrainerSync.__new__(RLHooksPPOTrainerSync)
    trainer.rl = RunManager(example_config(out_dir))
    trainer.driver = StepDriver(trainer.rl)
    trainer.tokenizer, trainer.adapter_functions = tokenizer, FUNCTIONS
    trainer.scored_columns, trainer.reward_in_extras = trainer.rl.batch_columns(), True  # verl's naive manager
    trainer.global_steps = STEP
    return trainer


def begin_step(trainer: Any) -> None:
    for rec in trainer.rl.components:  # a table's running selection starts with the step (its first rows read)
        if hasattr(rec.obj, "_cand"):
            rec.obj._cand = None
    trainer._step_metrics, trainer._filter_counts = {}, {}
    trainer._step_counts = {"generated": 0.0, "kept": 0.0, "dispatches": 1.0, "scored": 0.0}


#: what verl's V1 ``_compute_metrics`` reads of the trained batch for its own metrics (verl 0.9.1), every step,
#: with or without rlhooks: the step's end takes advantage and final_reward from it (trainer.verl_metric_read)
VERL_METRIC_FIELDS = ("prompts", "responses", "response_mask", "values", "advantages", "returns", "rm_scores",
                      "token_level_rewards", "num_turns")


def verl_metric_read(meta: Any, stored: set[str]) -> Any:
    """verl's own read of the trained batch in ``_compute_metrics`` (not rlhooks's: untimed, not counted)."""
    import transfer_queue as tq

    return tq.kv_batch_get(keys=list(meta.keys), partition_id=meta.partition_id,
                           select_fields=[f for f in VERL_METRIC_FIELDS if f in stored])


def dispatched_prompts(keys: list[str]) -> Any:
    """The prompts' TensorDict as the trainer hands it to the agent loop (uid, dataset row, source)."""
    from verl.utils import tensordict_utils as tu

    import uuid

    uids = sorted({k.split("_")[0] for k in keys})
    rows = [uuid.UUID(u).int % 10**6 for u in uids]  # put_trajectories: uid prompt_uid(seed * 10**6 + g), row g
    return tu.get_tensordict({"uid": np.asarray(uids, dtype=object), "rlhooks_row": np.asarray(rows, dtype=object),
                              "data_source": np.asarray([SOURCES[r % len(SOURCES)] for r in rows], dtype=object)})


def trained_batch_before(trainer: Any, meta: Any) -> Any:
    """``_trained_batch`` as rlhooks had it before issue 40 (every scored field and the per-token fields read
    up front): the "before" reference of the step's end."""
    import numpy as np
    import transfer_queue as tq

    from rlhooks.core import batch as cols
    from rlhooks.engines.verl.v1.batches import SCORED_FIELDS, _lengths, _padded, scored_batch

    keys = list(meta.keys)
    present = set(tq.kv_batch_get(keys=keys[:1], partition_id=meta.partition_id).keys())
    extra = [f for f in ("advantages", "token_level_rewards") if f in present]
    data = tq.kv_batch_get(keys=keys, partition_id=meta.partition_id,
                           select_fields=[f for f in SCORED_FIELDS if f in present] + extra)
    trained = scored_batch(data, keys, trainer.tokenizer, trainer.adapter_functions)
    adv = data.get("advantages")
    columns = {cols.ADVANTAGE: _padded(adv).float().sum(-1).numpy().astype(np.float64) / np.maximum(_lengths(adv), 1),
               cols.FINAL_REWARD: _padded(data.get("rm_scores")).float().sum(-1).numpy().astype(np.float64)}
    return trained.with_columns(**columns)


def profiled(fn: Any, reset: Any, top: int = 18) -> str:
    """Where one call's time goes: cProfile's top functions by own time."""
    import cProfile
    import io
    import pstats

    reset()
    prof = cProfile.Profile()
    prof.runcall(fn)
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("tottime")
    stats.print_stats(top)
    stats.sort_stats("cumtime").print_stats(top)  # and by time inside, callees included
    return text.getvalue()


def child(sizes: list[tuple[int, int]], repeat: int, out: Path, profile: bool = False, before: bool = True) -> None:
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="rlhb", dir="/tmp"))  # short: Ray's socket paths have a length limit
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(tmp / "ray"), log_to_driver=False)
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from rlhooks.engines.verl.cpu.tasks import SPECIAL, make_tokenizer
    from rlhooks.engines.verl.v1.batches import SCORED_FIELDS
    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    started = time.perf_counter() - t0
    counter = ReadCounter()
    tokenizer = make_tokenizer()
    vocab = (len(SPECIAL), tokenizer.vocab_size)
    rows: list[dict[str, Any]] = []
    trainer = rlhooks_trainer(tmp / "runs", tokenizer)
    args = dict(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
                sampler_kwargs={}, refill_fn=lambda n: None)
    try:
        with trainer.rl.running():
            for seed, (count, tokens) in enumerate(sizes, start=1):
                t_put = time.perf_counter()
                keys, tags = put_trajectories(count, tokens, vocab, seed)
                put_s = time.perf_counter() - t_put
                verl = ReplayBuffer(**args, filter_groups_metric="acc", train_batch_size=count // N, gen_batch_size=1)
                ours = RLHooksReplayBuffer(**args)
                ours.attach(trainer, filters=True, train_batch_size=count // N, gen_batch_size=1, max_inflight_gen_batches=1)
                trainer.replay_buffer = ours
                for buffer in (verl, ours):
                    buffer._sync_metadata_from_transfer_queue()

                def judged(buffer: Any) -> Any:
                    def reset() -> None:
                        buffer._dapo_classification_cache["train"].clear()
                        getattr(buffer, "_judged_rows", {}).clear()
                        begin_step(trainer)
                    return reset

                prompts = dispatched_prompts(keys)
                row_dispatch = measure(lambda: ours.remember_dispatched(prompts), counter, lambda: None, repeat)

                row: dict[str, Any] = {"trajectories": count, "tokens": tokens, "put_s": put_s}
                verl_dropped = verl._dapo_filtered_keys("train")[0]
                begin_step(trainer)
                ours._dapo_filtered_keys("train")  # the once-per-run probe of the fields present (untimed)
                assert ours._dapo_filtered_keys("train")[0] == verl_dropped  # the same groups dropped
                meta = KVBatchMeta(partition_id="train", keys=keys, tags=tags)
                judged_rows = {p: list(v) for p, v in ours._judged_rows.items()}
                dispatched = dict(ours._dispatched)
                held: dict[str, Any] = {}

                def before_end() -> None:  # as judging left the buffer; verl's own metric read of the batch
                    ours._judged_rows.clear()
                    ours._judged_rows.update({p: list(v) for p, v in judged_rows.items()})
                    ours._dispatched = dict(dispatched)
                    held["data"] = None
                    held["data"] = verl_metric_read(meta, ours._stored_fields)

                def step_end(build: Any) -> Any:
                    return lambda: trainer.driver.finish_step(STEP, build(meta), {"timing_s/step": 1.0})

                def ours_end(m: Any) -> Any:
                    return trainer._trained_batch(m, held.get("data"))

                def judged_again() -> None:  # the prompts as dispatched (the last step end forgot the trained ones)
                    judged(ours)()
                    ours._dispatched = dict(dispatched)

                # verl's buffer, rlhooks's judging and its step's end, in turn at each repeat (interleaved)
                row.update(measure_interleaved({
                    "verl": (lambda: verl._dapo_filtered_keys("train"), judged(verl)),
                    "rlhooks": (lambda: ours._dapo_filtered_keys("train"), judged_again),
                    "rlhooks_end": (step_end(ours_end), before_end),
                }, counter, repeat))
                held.clear()
                # a step that logs no table (9 of the table's every 10): the same judging reads no text
                trainer.global_steps = STEP + 1
                row["rlhooks_plain"] = measure(lambda: ours._dapo_filtered_keys("train"), counter, judged_again, 1)
                trainer.global_steps = STEP
                row["rlhooks"]["s"] += row_dispatch["s"]  # the dispatch's share (rows and sources kept)
                row["rlhooks"]["dispatch_s"] = row_dispatch["s"]
                if profile:
                    row["profile"] = {"verl": profiled(lambda: verl._dapo_filtered_keys("train"), judged(verl)),
                                      "rlhooks": profiled(lambda: ours._dapo_filtered_keys("train"), judged(ours)),
                                      "rlhooks_end": profiled(step_end(ours_end), before_end)}
                    held.clear()
                if before and count * tokens <= BEFORE_MAX_TOKENS and not profile:
                    present = [f for f in SCORED_FIELDS if f in set(tq.kv_batch_get(keys=keys[:1], partition_id="train").keys())]
                    ours._fields_cache, ours._dispatched = present, {}  # every field up front, as before
                    row["before"] = measure(lambda: ours._dapo_filtered_keys("train"), counter, judged(ours), repeat)
                    row["before_end"] = measure(step_end(lambda m: trained_batch_before(trainer, m)), counter,
                                                lambda: None, repeat)
                    del ours._fields_cache
                tq.kv_clear(keys=[*{k.split("_")[0] for k in keys}, *keys], partition_id="train")
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        tq.close()
        ray.shutdown()
    out.write_text(json.dumps({"rows": rows, "start_s": started, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                               "load_average_start": load_start, "load_average_end": os.getloadavg()[0]}, indent=1))


# -- the parent: run the child, report -------------------------------------------------------------------
def measure_all(quick: bool, sizes: list[tuple[int, int]] | None = None, profile: bool = False,
                before: bool = True) -> dict[str, Any]:
    sizes = sizes or list(QUICK if quick else SIZES)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "v1_scale.json"
        cmd = [sys.executable, "-m", "benchmarks.bench_v1_scale", "--child", json.dumps(sizes),
               "--repeat", str(1 if quick else 3), "--out", str(out), *(["--profile"] if profile else []),
               *([] if before else ["--no-before"])]
        # a Ray of its own: its own token (Ray reads it at import: set for the child), no usage statistics
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0")
        log = Path(tmp) / "child.log"
        with log.open("w") as err:  # Ray's and TransferQueue's chatter; each size's row as it is measured
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=err, stderr=subprocess.STDOUT, text=True)
        rows = [line for line in log.read_text().splitlines() if line.startswith("{")]
        print("\n".join(rows), file=sys.stderr)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"bench_v1_scale child failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
        return json.loads(out.read_text())


def results(data: dict[str, Any]) -> list[Result]:
    out = []
    for r in data["rows"]:
        n, t = r["trajectories"], r["tokens"]
        v, j, e = r["verl"], r["rlhooks"], r["rlhooks_end"]
        added = j["s"] + e["s"]
        read = j["bytes"] + e["bytes"]
        mib = 2**20
        note = (f"judging {j['s'] * 1e3:.0f} ms + step end {e['s'] * 1e3:.0f} ms; read {j['bytes'] / mib:.2f} + "
                f"{e['bytes'] / mib:.2f} MiB vs verl {v['bytes'] / mib:.2f} MiB; peak RSS +{max(j['peak'], e['peak']) / mib:.0f} "
                f"MiB vs verl +{v['peak'] / mib:.0f} MiB")
        if "before" in r:
            b, be = r["before"], r["before_end"]
            note += (f"; before issue 40: {b['s'] + be['s']:.2f} s, read {(b['bytes'] + be['bytes']) / mib:.0f} MiB, "
                     f"peak RSS +{max(b['peak'], be['peak']) / mib:.0f} MiB")
        full = n == 16384 and t == 8192
        plain = r.get("rlhooks_plain")
        # a step's bytes: the mean over the table's period (the table reads the text of the rows it shows, on the
        # steps it logs); measurements without the plain step judge the table step alone
        per_step = (read + (EVERY - 1) * plain["bytes"]) / EVERY if plain else read
        if plain:
            note += f"; a step without the table {plain['bytes'] / mib:.2f} MiB"
            if read - plain["bytes"] > 0.1 * EVERY * v["bytes"]:  # the shown rows alone exceed the period's allowance
                note += ("; out of reach for a table that shows text at this size: the shown rows' token ids alone are "
                         "more than 1.1x allows over the table's period (docs/explanation/benchmarks.md, Bytes)")
        out.append(Result(
            case=f"V1 buffer + step end, {n:,} trajectories x {t:,} tokens (ref: verl's ReplayBuffer, DAPO on acc)",
            rlhooks_s=added, reference_s=v["s"], rows=n, peak_bytes=max(j["peak"], e["peak"]), note=note,
            target=("reads a step (mean over the table's 10) <= 1.1x verl's bytes" if plain else
                    "reads (judging + step end) <= 1.1x verl's bytes") + ("; time <= 1.25x verl's" if full else ""),
            met=(per_step <= 1.1 * v["bytes"]) and (not full or added <= 1.25 * v["s"]),
            margin=(f"reads a step {per_step / max(v['bytes'], 1):.2f}x verl's (table step {read / max(v['bytes'], 1):.2f}x: "
                    f"+{(read - plain['bytes']) / 1024:.0f} KiB, the shown rows' token ids; other steps "
                    f"{plain['bytes'] / max(v['bytes'], 1):.2f}x)" if plain else
                    f"judging reads {j['bytes'] / max(v['bytes'], 1):.2f}x verl's; with step end {read / max(v['bytes'], 1):.2f}x")
                   + f"; time {added / v['s']:.2f}x verl's",
        ))
    return out


def _busy(data: dict[str, Any]) -> bool:
    """Whether the machine was loaded during the measurement (a load average above its cores)."""
    return max(data.get("load_average_start", 0), data.get("load_average_end", 0)) > (data.get("cpus") or 2)


def chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    busy = _busy(data)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for tokens, marker in ((512, "o"), (4096, "s"), (8192, "^")):
        rows = [r for r in data["rows"] if r["tokens"] == tokens]
        if not rows:
            continue
        xs = [r["trajectories"] for r in rows]
        for key, label, color in (("verl", "verl's buffer", "C0"), ("rlhooks", "rlhooks judging (+ step end: bytes; a table step)", "C1"),
                                  ("total", "rlhooks judging + step end", "C2")):
            ys = [(r["rlhooks"]["s"] + r["rlhooks_end"]["s"]) if key == "total" else r[key]["s"] for r in rows]
            axes[0].plot(xs, [1e3 * y / x for x, y in zip(xs, ys)], color=color, marker=marker, ms=4, label=f"{label}, {tokens} tok")
            if key == "total":
                continue
            ys = [r[key]["bytes"] + (r["rlhooks_end"]["bytes"] if key == "rlhooks" else 0) for r in rows]
            axes[1].plot(xs, [y / 2**20 for y in ys], color=color, marker=marker, ms=4, label=f"{label}, {tokens} tok")
        plain = [r for r in rows if "rlhooks_plain" in r]
        if plain:  # a step's bytes over the table's period (results())
            axes[1].plot([r["trajectories"] for r in plain],
                         [(r["rlhooks"]["bytes"] + r["rlhooks_end"]["bytes"] + (EVERY - 1) * r["rlhooks_plain"]["bytes"])
                          / EVERY / 2**20 for r in plain], color="C2", ls="--", marker=marker, ms=4,
                         label=f"rlhooks, a step (mean over the table's {EVERY}), {tokens} tok")
        before = [r for r in rows if "before" in r]
        if before:
            axes[1].plot([r["trajectories"] for r in before], [(r["before"]["bytes"] + r["before_end"]["bytes"]) / 2**20
                                                               for r in before], color="C3",
                         marker=marker, ms=4, label=f"rlhooks before issue 40, {tokens} tok")
    axes[0].set(xscale="log", xlabel="trajectories judged", ylabel="ms per trajectory (median of 3)",
                title="cost per trajectory" + (" (a loaded machine: noisy)" if busy else ""))
    axes[1].set(xscale="log", yscale="log", xlabel="trajectories judged", ylabel="MiB read from TransferQueue",
                title="bytes read from TransferQueue a step")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    load = (f", load average {data['load_average_start']:.0f} -> {data['load_average_end']:.0f}"
            if "load_average_start" in data else ", loaded")
    fig.suptitle(f"rlhooks vs verl's V1 replay buffer on a local TransferQueue ({data.get('cpus', '?')}-core machine{load})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def publish(data: dict[str, Any]) -> list[Result]:
    """benchmarks/V1_SCALE.json, docs/img/v1_scale.png and this module's section of benchmarks/RESULTS.md."""
    from benchmarks.harness import markdown_table
    from benchmarks.run_all import machine, write_results

    (HERE / "V1_SCALE.json").write_text(json.dumps(data, indent=1))
    chart(data, REPO / "docs" / "img" / "v1_scale.png")
    got = results(data)
    load = data.get("load") or (f"load average {data['load_average_start']:.1f} at the start, {data['load_average_end']:.1f} "
                                f"at the end" if "load_average_start" in data else
                                f"load average {data['load_average_end']:.0f} at the end" if "load_average_end" in data else "")
    busy = _busy(data)
    load = (f" (measured on a shared, loaded machine: {load})" if busy else f" (nothing else running: {load})") if load else ""
    write_results({"bench_v1_scale": f"## bench_v1_scale\n\n{data.get('date', time.strftime('%Y-%m-%d'))}; "
                                     f"{machine()}{load}\n\n{markdown_table(got)}\n\nChart: cost and bytes against "
                                     f"trajectories, `docs/img/v1_scale.png`."})
    return got


def run(quick: bool = False) -> list[Result]:
    data = measure_all(quick)
    if not quick:  # run_all writes this module's RESULTS.md section
        (HERE / "V1_SCALE.json").write_text(json.dumps(data, indent=1))
        chart(data, REPO / "docs" / "img" / "v1_scale.png")
    return results(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", help='JSON list of [trajectories, tokens], e.g. "[[8192, 512]]"')
    ap.add_argument("--publish", metavar="JSON", help="re-publish a measurement (a V1_SCALE.json): chart, RESULTS.md section")
    ap.add_argument("--profile", action="store_true", help="also cProfile one call of each (saved in the JSON)")
    ap.add_argument("--save", metavar="JSON", help="save the measurement there (with --sizes)")
    ap.add_argument("--no-before", action="store_true", help="skip the 'before issue 40' variant (minutes at 16,384 rows)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child([tuple(s) for s in json.loads(args.child)], args.repeat, Path(args.out), args.profile, not args.no_before)
        return 0
    from benchmarks.harness import markdown_table

    if args.publish:
        print(markdown_table(publish(json.loads(Path(args.publish).read_text()))))
        return 0
    data = measure_all(args.quick, [tuple(s) for s in json.loads(args.sizes)] if args.sizes else None, args.profile,
                       not args.no_before)
    if args.save:
        Path(args.save).write_text(json.dumps(data, indent=1))
    print(markdown_table(publish(data) if not args.quick and not args.sizes else results(data)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
