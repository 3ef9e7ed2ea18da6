"""Issue 40 item 4: does rlhooks hold generation back in verl's ``colocate_async`` mode?

    python -m benchmarks.v1_generation                  # 3 pairs of runs, 16 steps each; writes its RESULTS.md section
    python -m benchmarks.v1_generation --pairs 1 --steps 6 --no-write

In ``colocate_async`` verl's trainer polls the replay buffer for finished groups while the rollout replicas generate;
rlhooks judges groups (its filters, reward observers, tables) in that loop, so a slow judge would delay the refills
dispatched to the servers. Here the CPU learner's rollout server is the fixed-rate stub
(``rlhooks.engines.verl.cpu.rollout_server``, ``RLHOOKS_CPU_ROLLOUT_STUB``: canned answers, a batch taking its tokens /
rate seconds), so generation costs the same in every run, and each run's server logs the samples it generated.
Two ``rlhooks train`` runs of the CPU example config in ``rlhooks_colocate_async`` take turns:

* ``builtins``: every built-in that judges or observes a group (the dapo filter, the selective_rollout prompt
  filter, source metrics, the reward monitor, top/bottom-k tables, the JSONL backend);
* ``bare``: no rlhooks plugin but the reward functions, which are verl's reward loop's (both runs score the same).

The figure is samples generated a second over the run's generation window (the server's first to last batch,
the first 10% of samples left out as warm-up), builtins / bare per pair; the goal is at least 0.98x. Not a unit
test: ~4 min a run on 2 cores at the default rate (~70 s of it generating, the rest starting Ray actors
and training).

Runs of one config differed by more than 10% on 2 cores while the stub generated during training (below); since
the CPU server parks what arrives behind verl's abort until ``resume_generation``, as vLLM does, they differ by
~1.5% (bare 7.32-7.42, builtins 7.51-7.60 samples a second, 2026-11-29). The second figure is measured inside each
builtins run. With the stub, generation takes the same time whatever else
runs (a batch sleeps its tokens / rate), so rlhooks can hold it back only by keeping the server waiting: while
rlhooks's code runs in the trainer (judging finished groups before verl refills, the prompt stage before a
dispatch, the step's end: the intervals of ``timing_s/rlhooks`` and ``timing_s/rlhooks_step_end``) and the
server has nothing to decode. The trainer appends each of those intervals to the ``RLHOOKS_V1_TRACE`` file (wall
time); the server's log gives each batch's end and its tokens, so it was busy over ``[end - tokens / rate, end]``
(one batch at a time) and idle in the window's other seconds, flagged asleep or not (verl waking it late is
waiting too). ``held_back`` sums the seconds where an rlhooks interval and an idle interval overlap: the most
generation rlhooks could have held back; as a share of the busy seconds, the run generates at least
``1 - share`` of what it would without rlhooks (removing that waiting would shorten the window by at most those
seconds). Not counted: rlhooks code that ends while the server is busy can still delay the trainer's next poll
by its length (the margin also gives all rlhooks seconds in the window over the busy ones, the looser bound);
the backends' worker threads (the JSONL writer, off the trainer's loop) and the replay buffer's adaptive poll
interval (the same code in both configs) are not traced. Busy seconds, not the seconds
between verl's sleep and wake calls, are the generation time: before the CPU server had vLLM's submission gate, it
decoded requests that reached it after verl's abort, while flagged asleep, so awake seconds undercounted it by a
third to a half (samples per awake second: in the JSON only; ``busy_asleep_s`` is now 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Result

HERE = Path(__file__).parent
EXAMPLE = HERE.parent / "examples" / "configs" / "verl_cpu_tiny.yaml"
#: the stub's rate (tokens a second): a generation batch (8 prompts x 8 answers, ~450 tokens) takes ~4.5 s, so that
#: generation is most of a step, as at production shapes (at 2,000 the server was awake ~8% of a run and any fixed
#: cost of the trainer's loop weighed 20x more against it)
RATE = 100.0
#: the canned answers differ in format, not in correctness: the dapo filter judges the total reward (seq_reward)
RUNS = {
    "builtins": ["rlhooks.filters=[{name: dapo, metric: seq_reward}]",
                 "rlhooks.prompt_filters=[{name: selective_rollout, p_easy: 0.05, p_hard: 0.05, seed: 1}]",
                 "rlhooks.rewards=[format_exact,format_approx,check_answer,check_numbers,source_metrics,reward_monitor]",
                 "rlhooks.samples=[{name: top_bottom_k, k: 2, every: 1}]", "rlhooks.backends=[jsonl]"],
    "bare": ["rlhooks.filters=[]", "rlhooks.prompt_filters=[]", "rlhooks.samples=[]", "rlhooks.backends=[]",
             "rlhooks.rewards=[format_exact,format_approx,check_answer,check_numbers]"],
}


Interval = tuple[float, float]


def read_log(log: Path) -> tuple[list[tuple[float, int, int]], list[tuple[float, str]]]:
    """The stub server's log: its batches ``(end time, requests, tokens)`` and its ``(time, sleep|wake)`` events."""
    batches: list[tuple[float, int, int]] = []
    events: list[tuple[float, str]] = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            batches.append((float(parts[0]), int(parts[1]), int(parts[2])))
        elif len(parts) == 2:
            events.append((float(parts[0]), parts[1]))
    return batches, events


def window_start(batches: list[tuple[float, int, int]], warmup: float) -> int:
    """The index of the batch whose end opens the generation window: the first 10% of samples are warm-up."""
    total, skip, first = sum(n for _, n, _ in batches), 0, 0
    while first < len(batches) - 1 and skip + batches[first][1] <= warmup * total:
        skip += batches[first][1]
        first += 1
    return first


def generation_rate(log: Path, warmup: float = 0.1) -> dict:
    """From the stub server's log: samples a second over the generation window (the server's first to last batch,
    the first 10% of samples left out as warm-up), and per second the server was awake in that window (verl puts
    a colocated server to sleep while the actor updates; kept for comparison only: before the server parked requests
    behind verl's abort, it decoded some while flagged asleep, and awake seconds undercounted its busy ones)."""
    batches, events = read_log(log)
    first = window_start(batches, warmup)
    t0, t1 = batches[first][0], batches[-1][0]
    samples = sum(n for _, n, _ in batches[first + 1:])  # the batches ending after the window's first one
    generated = sum(tokens for _, _, tokens in batches[first + 1:])
    awake = t1 - t0 - length(clip(asleep_intervals(events), t0, t1))
    return {"samples_per_s": samples / (t1 - t0), "samples_per_awake_s": samples / awake if awake > 0 else None,
            "samples": samples, "window_s": t1 - t0, "awake_s": awake, "sleeps": sum(n == "sleep" for _, n in events),
            # the stub's answers differ in length (one of two by the request's seed): which prompts a run draws
            # changes its samples a second at the same rate; tokens a second do not
            "tokens": generated, "tokens_per_s": generated / (t1 - t0),
            "tokens_per_awake_s": generated / awake if awake > 0 else None}


def union(intervals: list[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, none empty."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    """The union of ``intervals`` inside ``[lo, hi]``."""
    return union([(max(a, lo), min(b, hi)) for a, b in intervals])


def gaps(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    """What ``[lo, hi]`` holds outside ``intervals``."""
    out, at = [], lo
    for a, b in clip(intervals, lo, hi):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    return out + [(at, hi)] if hi > at else out


def intersect(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """Where both ``x`` and ``y`` hold."""
    x, y = union(x), union(y)
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(intervals: list[Interval]) -> float:
    return float(sum(b - a for a, b in union(intervals)))


def asleep_intervals(events: list[tuple[float, str]]) -> list[Interval]:
    """When the server was flagged asleep: from each ``sleep`` to the next ``wake`` (a server starts awake; one
    asleep at the log's end, to infinity)."""
    out, since = [], None
    for t, name in sorted(events):
        if name == "sleep" and since is None:
            since = t
        elif name == "wake" and since is not None:
            out.append((since, t))
            since = None
    return out + [(since, float("inf"))] if since is not None else out


def read_trace(trace: Path) -> list[tuple[float, float, str]]:
    """The trainer's ``RLHOOKS_V1_TRACE`` file: rlhooks's timed intervals, ``(start, end, what)`` in wall time."""
    if not trace.exists():
        return []
    return [(float(a), float(b), what) for a, b, what in (line.split() for line in trace.read_text().splitlines())]


def held_back(log: Path, trace: Path, rate: float, warmup: float = 0.1) -> dict:
    """rlhooks's code in the trainer against the stub server's idle time, over the generation window.

    Each batch keeps the server busy from ``end - tokens / rate`` to its logged end (it decodes one batch at a
    time); it is idle in the window's other seconds, asleep or not (a wake-up verl waits on counts too). The
    seconds an rlhooks interval overlaps an idle one are the most generation rlhooks could have held back."""
    batches, events = read_log(log)
    first = window_start(batches, warmup)
    t0, t1 = batches[first][0], batches[-1][0]
    busy = clip([(end - tokens / rate, end) for end, _, tokens in batches], t0, t1)
    idle = gaps(busy, t0, t1)
    asleep = clip(asleep_intervals(events), t0, t1)
    spans = read_trace(trace)
    ours = clip([(a, b) for a, b, _ in spans], t0, t1)
    held = intersect(ours, idle)
    busy_s = length(busy)
    return {"busy_s": busy_s, "idle_s": length(idle), "asleep_s": length(asleep),
            "busy_asleep_s": length(intersect(busy, asleep)),  # decoding while flagged asleep
            "rlhooks_window_s": length(ours), "rlhooks_total_s": sum(b - a for a, b, _ in spans),
            "held_back_s": length(held), "held_back_asleep_s": length(intersect(held, asleep)),
            "held_back_by": {what: length(intersect(clip([(a, b) for a, b, w in spans if w == what], t0, t1), idle))
                             for what in sorted({w for _, _, w in spans})},
            "share": length(held) / busy_s if busy_s > 0 else None}


def one_run(name: str, steps: int, work: Path, rate: float) -> dict:
    folder = work / f"{name}-{time.strftime('%H%M%S')}"
    folder.mkdir(parents=True)
    prepared = subprocess.run([sys.executable, "-m", "rlhooks.engines.verl.cpu", "prepare", "runs/tiny"], cwd=folder,
                              capture_output=True, text=True)
    if prepared.returncode != 0:
        raise RuntimeError(prepared.stderr[-2000:])
    log, trace = folder / "server.log", folder / "trainer.trace"
    # both configs traced alike (a line a timed interval): the trace's own cost falls on both
    env = {**os.environ, "RLHOOKS_CPU_ROLLOUT_STUB": str(rate), "RLHOOKS_CPU_ROLLOUT_LOG": str(log),
           "RLHOOKS_V1_TRACE": str(trace)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rlhooks.cli", "train", "--config", str(EXAMPLE),
         "trainer.v1.trainer_mode=rlhooks_colocate_async", f"trainer.total_training_steps={steps}",
         "trainer.test_freq=-1", "trainer.save_freq=-1", f"rlhooks.run.name=gen-{name}", *RUNS[name]],
        cwd=folder, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: rlhooks train exited {done.returncode}:\n{done.stderr[-3000:]}")
    whole = generation_rate(log, warmup=0.0)
    out = {**generation_rate(log), "wall_s": time.monotonic() - started, "awake_total_s": whole["awake_s"],
           "overlap": held_back(log, trace, rate)}
    metrics = sorted(folder.glob("runs/**/metrics.jsonl"))
    if metrics:  # the builtins run's JSONL backend
        out["rlhooks_s"] = rlhooks_seconds(metrics[0])
    return out


def rlhooks_seconds(metrics: Path) -> float:
    """rlhooks's seconds in the trainer over a run: each step's ``timing_s/rlhooks`` and ``timing_s/rlhooks_step_end``
    (the latter is logged with the next step; the last step's end is not in the file: at most one step's)."""
    total = 0.0
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "metrics":
            values = record["metrics"]
            total += sum(float(values.get(k) or 0.0) for k in ("timing_s/rlhooks", "timing_s/rlhooks_step_end"))
    return total


def measure(pairs: int, steps: int, rate: float, work: Path) -> dict:
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"builtins": [], "bare": []}
    for i in range(pairs):  # in turn, the order swapped each pair: a change of load falls on both
        for name in (("builtins", "bare") if i % 2 == 0 else ("bare", "builtins")):
            runs[name].append(one_run(name, steps, work, rate))
            got = runs[name][-1]
            o = got["overlap"]
            print(f"{name}: {got['samples_per_s']:.2f} samples a second over the {got['window_s']:.1f} s window, busy "
                  f"{o['busy_s']:.1f} s, idle {o['idle_s']:.1f} s; rlhooks {o['rlhooks_window_s']:.2f} s in it, "
                  f"{o['held_back_s']:.2f} s of it while idle ({got['sleeps']} sleeps)", file=sys.stderr)
    for got in runs["builtins"]:
        if "rlhooks_s" not in got:
            raise RuntimeError("the builtins run wrote no metrics.jsonl: its rlhooks seconds are unknown")
        if not got["overlap"]["rlhooks_total_s"] > 0:  # a bound of 1.000x from a trace that never arrived
            raise RuntimeError("the builtins run's trainer wrote no RLHOOKS_V1_TRACE intervals")
    ratios = [b["samples_per_s"] / r["samples_per_s"] for b, r in zip(runs["builtins"], runs["bare"])]
    awake_ratios = [b["samples_per_awake_s"] / r["samples_per_awake_s"] for b, r in zip(runs["builtins"], runs["bare"])]
    return {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": f"{os.cpu_count()} cores",
            "load_avg": [load_before, os.getloadavg()[0]], "steps": steps, "rate": rate, "runs": runs,
            "ratios": ratios, "awake_ratios": awake_ratios}


def results(result: dict) -> list[Result]:
    b = statistics.median(r["samples_per_s"] for r in result["runs"]["builtins"])
    r = statistics.median(r["samples_per_s"] for r in result["runs"]["bare"])
    ratio = statistics.median(result["ratios"])
    spread = [x["samples_per_s"] for runs in result["runs"].values() for x in runs]

    def busy(name: str) -> str:
        return ", ".join(f"{x['overlap']['busy_s'] / x['window_s']:.2f}" for x in result["runs"][name])

    def asleep(name: str) -> str:
        return ", ".join(f"{x['overlap']['asleep_s']:.1f}" for x in result["runs"][name])

    # Result's times are seconds a sample, so that its ratio reads as rlhooks's cost
    return [Result(case=f"colocate_async generation with every built-in vs none, stub rollout at {result['rate']:g} "
                        f"tokens/s, {result['steps']} steps", rlhooks_s=1 / b, reference_s=1 / r,
                   # every pair, not the median: runs of one config spread more than the 2% asked
                   target=">= 0.98x the bare run's samples/s, every pair", met=min(result["ratios"]) >= 0.98,
                   margin=f"{ratio:.3f}x the samples a second over the window (pairs: "
                          f"{', '.join(f'{x:.3f}' for x in result['ratios'])}"
                          + (f"; per second awake: {', '.join(f'{x:.3f}' for x in result['awake_ratios'])}"
                             if result.get("awake_ratios") else "") + ")",
                   note=f"{b:.2f} vs {r:.2f} samples a second, medians of {len(result['ratios'])} pairs; all runs "
                        f"{min(spread):.2f}-{max(spread):.2f}; the server busy (tokens / rate) {busy('builtins')} vs "
                        f"{busy('bare')} of the window"
                        + (f", asleep (the actor training) {asleep('builtins')} vs {asleep('bare')} s of it"
                           if all("asleep_s" in x["overlap"] for runs in result["runs"].values() for x in runs) else "")),
            *bound_results(result)]


def bound_results(result: dict) -> list[Result]:
    """The measured bound (module docstring): in each builtins run, the seconds rlhooks's code ran in the trainer
    while the server was idle, over the server's busy seconds in the window."""
    runs = [r for r in result["runs"]["builtins"] if r.get("overlap", {}).get("share") is not None]
    if not runs:
        return []
    shares = [r["overlap"]["share"] for r in runs]
    worst = max(shares)

    def each(key: str, digits: int = 2) -> str:
        return ", ".join(f"{r['overlap'][key]:.{digits}f}" for r in runs)

    by = {what: max(r["overlap"]["held_back_by"].get(what, 0.0) for r in runs)
          for r in runs for what in r["overlap"]["held_back_by"]}
    looser = max(r["overlap"]["rlhooks_window_s"] / r["overlap"]["busy_s"] for r in runs)
    return [Result(case=f"colocate_async generation, every built-in: seconds rlhooks's code ran in the trainer while "
                        f"the stub server was idle, over its busy seconds, {result['steps']} steps",
                   rlhooks_s=max(r["overlap"]["held_back_s"] for r in runs),
                   reference_s=None, target="share <= 2% (measured: trainer trace against the server's batch log)",
                   met=worst <= 0.02,
                   margin=f"at least {1 - worst:.3f}x (shares: {', '.join(f'{100 * x:.2f}%' for x in shares)}); "
                          f"counting all rlhooks seconds in the window, at least {1 - looser:.3f}x",
                   note=f"rlhooks while idle {each('held_back_s')} s (asleep {each('held_back_asleep_s')} s; at most "
                        + ", ".join(f"{w} {s:.2f}" for w, s in sorted(by.items())) + f") against {each('busy_s', 1)} s "
                        f"busy; all rlhooks in the window {each('rlhooks_window_s')} s, idle {each('idle_s', 1)} s; "
                        f"traced over the run {each('rlhooks_total_s')} s (its metrics: "
                        + ", ".join(f"{r['rlhooks_s']:.2f}" for r in runs if "rlhooks_s" in r) + " s)")]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness import markdown_table
    from benchmarks.run_all import machine, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rate", type=float, default=RATE)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-v1-generation-") as tmp:
        result = measure(args.pairs, args.steps, args.rate, Path(tmp))
    print(json.dumps(result, indent=1))
    table = markdown_table(results(result))
    print(table)
    if not args.no_write:
        (HERE / "V1_GENERATION.json").write_text(json.dumps(result, indent=1) + "\n")
        write_results({"v1_generation": f"## v1_generation\n\n{result['date']} UTC; {machine()}; load "
                                              f"average {result['load_avg'][0]:.1f} -> {result['load_avg'][1]:.1f} "
                                              f"(issue 40 item 4: samples generated a second in colocate_async)"
                                              f"\n\n{table}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
