"""A V1 step against a legacy step on the real CPU learner: the same config, side by side in one invocation.

    python -m benchmarks.cpu_step                 # 6 steps on each trainer; writes benchmarks/CPU_STEP.md + .json
    python -m benchmarks.cpu_step --steps 4 --no-write

Both runs are ``benchmarks.cpu_learning``'s (dapo, seed 0: 8 prompts x 8 answers a generation batch, the DAPO
filter through the rlhooks replay buffer on V1): the legacy trainer in this process, then verl's V1 trainer on a
local Ray, as ``rlhooks train`` runs it. A step's time is verl's own ``timing_s/step``; the figure is the median
of steps 2 onwards (step 1 warms up). The V1 step is split by verl's phases (``timing_s/gen``: rollout, reward
workers, TransferQueue and the replay buffer's polls; old log-probs; advantages; the actor update; the weight
sync; rlhooks's own ``timing_s/rlhooks``), and both runs' CPU a step by process (``CPUMeter``: this process and
everything it started, from ``/proc``), which bounds what a V1 step can take on the machine's cores. Not a unit
test: ~4-6 min on 2 cores, most of it starting V1's Ray actors (docs/DEVELOPMENT.md, "The round of issues 36-40",
has each session's figures and profiles).
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import cpu_learning

HERE = Path(__file__).parent
CONFIG, SEED = "dapo", 0
#: verl's phases of a V1 step, as it times them (timing_s/<phase>), in step order
PHASES = ["gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "rlhooks"]


def median_steps(run: dict, key: str) -> float | None:
    """The median of ``timing_s/<key>`` over steps 2 onwards (None where no such step logged it)."""
    values = [t[f"timing_s/{key}"] for step, t in run["timing"].items() if step >= 2 and f"timing_s/{key}" in t]
    return statistics.median(values) if values else None


class CPUMeter(threading.Thread):
    """The CPU time (user + system, psutil's) of this process and every process it started (the Ray it starts
    and Ray's actors are its descendants), every ``interval`` seconds; ``watch`` is called each time with the moment
    (the V1 run's step ends are read from its metrics file as they are written). Its own reads (~2 ms a sample on 2
    cores) are in the driver's CPU."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval = interval
        #: [(time, {(pid, start time): (name, CPU-s so far)})]: a process keeps its last figures once it ended
        self.history: list[tuple[float, dict[tuple[int, int], tuple[str, float]]]] = []
        self.watch = None
        self._seen: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop_event = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        while not self._stop_event.is_set():
            self._tick_once()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        """Stops sampling after one last sample (what the last interval did, a step that ended in it); raises what
        stopped the meter early, if anything did: its figures would be stale."""
        self._stop_event.set()
        self.join()
        if self.error is None:
            self._tick_once()
        if self.error is not None:
            raise RuntimeError(f"the CPU meter stopped: {self.error!r}") from self.error

    def _tick_once(self) -> None:
        now = time.time()
        try:
            self._sample()
            if self.watch:
                self.watch(now)
        except Exception as exc:
            self.error = exc
            self._stop_event.set()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            try:
                with process.oneshot():
                    cpu = process.cpu_times()
                    # (pid, start time): a pid used again later is another process
                    key = (process.pid, int(process.create_time() * 100))
                    # an ended process not yet waited for has no command line any more: it keeps the name it had
                    name = self.process_name(process) or self._seen.get(key, ("?",))[0]
            except psutil.NoSuchProcess:  # ended and waited for since the listing
                continue
            self._seen[key] = (name, cpu.user + cpu.system)
        self.history.append((time.time(), dict(self._seen)))

    @staticmethod
    def process_name(process) -> str | None:
        """A Ray actor's class (``ray::WorkerDict.update_actor`` -> ``ray::WorkerDict``), ``driver`` for this
        process, else the program, or a Python process's script or module (``raylet``, ``log_monitor.py``); None
        when it has no command line (it ended)."""
        import psutil

        if process.pid == os.getpid():
            return "driver (this process)"
        try:
            argv = process.cmdline()
        except (psutil.ZombieProcess, psutil.AccessDenied):
            return None
        if not argv or not argv[0]:
            return None
        if argv[0].startswith("ray::"):
            return argv[0].split()[0].split(".")[0]
        program = os.path.basename(argv[0])
        if program.startswith("python"):  # its module or script
            if "-m" in argv[:-1]:
                return argv[argv.index("-m") + 1]
            program = next((os.path.basename(a) for a in argv[1:] if a.endswith(".py")), program)
        return program

    def at(self, moment: float) -> dict[tuple[int, int], tuple[str, float]]:
        """Each process's (name, CPU-s) at the last sample taken at or before ``moment``."""
        before = [processes for t, processes in self.history if t <= moment]
        return before[-1] if before else {}

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU-s each process used from ``start`` to ``end``, summed by its name at ``end`` (a Ray worker renames
        itself when it becomes an actor; what it used before counts where it was then)."""
        first, used = self.at(start), defaultdict(float)
        for key, (name, cpu) in self.at(end).items():
            used[name] += cpu - first.get(key, (name, 0.0))[1]
        return {name: cpu for name, cpu in used.items() if cpu > 0}


def _step_end_watcher(log: Path, ended: dict[int, float]):
    """``watch(now)`` for a V1 run: the steps whose metrics verl's file logger has written by ``now``."""
    def watch(now: float) -> None:
        try:
            lines = log.read_text().splitlines()
        except OSError:
            return
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # a line being written
                continue
            if "timing_s/step" in record.get("data", {}):
                ended.setdefault(int(record["step"]), now)
    return watch


def cpu_per_step(meter: CPUMeter, ended: dict[int, float]) -> dict:
    """CPU-s a step by process over steps 3 onwards (from the end of step 2 to the end of the last step)."""
    last = max(ended)
    steps, start, end = last - 2, ended[2], ended[last]
    used = meter.between(start, end)
    return {"steps": steps, "wall_s": end - start,
            "by_process": {name: cpu / steps for name, cpu in sorted(used.items(), key=lambda kv: -kv[1])}}


def decode_per_step(trace: Path, decodes: Path) -> dict[int, float]:
    """Seconds the CPU rollout server spent decoding in each V1 step from step 2: its decodes
    (``rollout_server.DECODE_TRACE_ENV``: ``<start> <end> <requests>``) that began after the previous step's end and
    by this one's. A step's end is the end of the trainer's n-th ``step_end`` interval (``v1.trainer.TRACE_ENV``:
    ``<start> <end> <what>``, one a training step). Not the last step: verl validates in it (the run's last), and
    its decodes would count."""
    ends = [float(end) for _, end, what in (line.split() for line in trace.read_text().splitlines())
            if what == "step_end"]
    spans = [(float(a), float(b)) for a, b, _ in (line.split() for line in decodes.read_text().splitlines())]
    return {step: sum(b - a for a, b in spans if ends[step - 2] < a <= ends[step - 1])
            for step in range(2, len(ends))}


def measure(steps: int, out: Path) -> dict:
    from rlhooks.engines.verl.cpu import platform, rollout_server, runner
    from rlhooks.engines.verl.v1.trainer import TRACE_ENV

    assets = runner.prepare(out / "assets")
    platform.install()
    load_before = os.getloadavg()[0]
    meter = CPUMeter()
    meter.start()
    legacy = cpu_learning.one_run(CONFIG, SEED, steps, steps + 1, out / "legacy", assets, trainer="legacy")
    v1_ended: dict[int, float] = {}
    meter.watch = _step_end_watcher(out / "v1" / "verl_metrics.jsonl", v1_ended)
    # the trainer's step ends and the rollout server's decodes, in the Ray processes' environment (set before Ray starts)
    trace, decodes = out / "v1" / "rlhooks_trace.txt", out / "v1" / "decodes.txt"
    trace.parent.mkdir(parents=True, exist_ok=True)
    traces = {TRACE_ENV: str(trace.resolve()), rollout_server.DECODE_TRACE_ENV: str(decodes.resolve())}
    os.environ.update(traces)
    try:
        with cpu_learning.shared_ray(assets):
            v1 = cpu_learning.one_run(CONFIG, SEED, steps, steps + 1, out / "v1", assets, trainer="v1",
                                      val_max_samples=8)
    finally:
        for name in traces:
            os.environ.pop(name, None)
    meter.stop()
    return {"date": time.strftime("%Y-%m-%d"), "commit": _commit(), "machine": f"{os.cpu_count()} cores, {host.machine()}",
            "load_avg": [load_before, os.getloadavg()[0]], "steps": steps,
            "runs": {"legacy": _compact(legacy, cpu_per_step(meter, legacy["step_ended"])),
                     "v1": {**_compact(v1, cpu_per_step(meter, v1_ended)),
                            "decode_s": {str(k): v for k, v in decode_per_step(trace, decodes).items()}}}}


def _commit() -> str:
    """The code measured: ``git describe --always --dirty`` of this checkout (``unknown`` outside one)."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=HERE.parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _compact(run: dict, cpu: dict) -> dict:
    return {"wall_s": run["wall_s"], "timing": {str(k): v for k, v in run["timing"].items()},
            "generated": {str(k): v for k, v in run["generated"].items()}, "cpu": cpu}


def side_by_side(run: dict) -> dict[str, float]:
    """A run's step split in two, medians over steps 2 onwards: trajectories generated a step, verl's
    ``timing_s/gen`` (a step's generation: every wave, rewards included), the generation per trajectory generated
    (ms; the median of each step's ratio) and the rest of the step (``timing_s/step`` - ``timing_s/gen``: old
    log-probs, advantages, the update, the weight sync, rlhooks); for a V1 run with ``decode_s``, also the rollout
    server's decoding per trajectory generated (ms, the same way)."""
    generated = {int(step): n for step, n in run["generated"].items()}  # int or, read from the JSON, str keys
    steps = [(t, generated[int(step)]) for step, t in run["timing"].items()
             if int(step) >= 2 and generated.get(int(step)) and "timing_s/gen" in t and "timing_s/step" in t]
    if not steps:
        raise ValueError("no step 2 onwards with timing_s/gen, timing_s/step and trajectories generated")
    median = statistics.median
    out = {"trajectories": median(n for _, n in steps), "gen_s": median(t["timing_s/gen"] for t, _ in steps),
           "gen_ms_per_trajectory": median(1000 * t["timing_s/gen"] / n for t, n in steps),
           "rest_s": median(t["timing_s/step"] - t["timing_s/gen"] for t, _ in steps),
           "step_s": median(t["timing_s/step"] for t, _ in steps)}
    if "decode_s" in run:  # a V1 run: the rollout server's decoding a step (``decode_per_step``)
        decoded = {int(step): s for step, s in run["decode_s"].items()}
        out["decode_ms_per_trajectory"] = median(1000 * decoded[int(step)] / generated[int(step)]
                                                 for step in run["timing"] if int(step) in decoded
                                                 and generated.get(int(step)))
    return out


def markdown(result: dict) -> str:
    runs = {name: {**r, "timing": {int(k): v for k, v in r["timing"].items()},
                   "generated": {int(k): v for k, v in r.get("generated", {}).items()}}
            for name, r in result["runs"].items()}
    legacy, v1 = (median_steps(runs[n], "step") for n in ("legacy", "v1"))
    code = f" (code: `{result['commit']}`)" if "commit" in result else ""
    lines = [
        "# A V1 step against a legacy step on the CPU learner",
        "",
        f"`python -m benchmarks.cpu_step --steps {result['steps']}` on {result['date']}{code}, {result['machine']}, load "
        f"average {result['load_avg'][0]:.1f} before the runs (the machine's own) and {result['load_avg'][1]:.1f} "
        "after them (theirs in it). Same config on both trainers "
        "(dapo, seed 0, 8 prompts x 8 answers a generation batch); verl's `timing_s/step`, median of steps "
        f"2-{result['steps']}.",
        "",
        "| trainer | step (s) | run wall (s) |",
        "| --- | ---: | ---: |",
        f"| legacy | {legacy:.2f} | {runs['legacy']['wall_s']:.0f} |",
        f"| V1 (`rlhooks_sync`) | {v1:.2f} | {runs['v1']['wall_s']:.0f} |",
        "",
        f"**V1 / legacy: {v1 / legacy:.2f}x.** Issue 36 asked for at most 2x; \"Both trainers, the step in two\" below "
        "shows why a V1 step on the CPU learner does not get there: it runs verl's agent loop for every trajectory, "
        "which the legacy learner does not run at all.",
        "",
        "Where a V1 step's time goes (verl's phases, median of the same steps):",
        "",
        "| phase | seconds |",
        "| --- | ---: |",
    ]
    for phase in PHASES:
        value = median_steps(runs["v1"], phase)
        if value is not None:
            lines.append(f"| `timing_s/{phase}` | {value:.2f} |")
    if all(r["generated"] for r in runs.values()):
        lines += _side_by_side_lines(runs)
    if all("cpu" in r for r in runs.values()):
        lines += _cpu_lines(runs, legacy, result["machine"])
    return "\n".join(lines) + "\n"


def _side_by_side_lines(runs: dict) -> list[str]:
    old, new = side_by_side(runs["legacy"]), side_by_side(runs["v1"])
    rows = [("trajectories generated a step", "trajectories", "{:.0f}"), ("`timing_s/gen` (s)", "gen_s", "{:.2f}"),
            ("generation per trajectory generated (ms)", "gen_ms_per_trajectory", "{:.1f}"),
            ("of it, the CPU rollout server decoding (ms; its batches' wall time)", "decode_ms_per_trajectory",
             "{:.1f}"),
            ("the rest of the step (s): log-probs, advantages, update, weight sync", "rest_s", "{:.2f}"),
            ("`timing_s/step` (s)", "step_s", "{:.2f}")]

    def cell(run: dict, key: str, fmt: str) -> str:
        return fmt.format(run[key]) if key in run else ""

    def ratio(key: str) -> str:
        return f"{new[key] / old[key]:.1f}x" if key in old and key in new and key != "trajectories" else ""

    lines = [
        "",
        "Both trainers, the step in two (medians of steps 2 onwards; the DAPO filter makes a step generate until 8 "
        "groups are kept, so the trajectories a step vary):",
        "",
        "| | legacy | V1 | V1 / legacy |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {label} | {cell(old, key, fmt)} | {cell(new, key, fmt)} | {ratio(key)} |"
          for label, key, fmt in rows if key in old or key in new),
        "",
        "The two trainers generate differently. The legacy CPU learner replaces verl's agent loop with rlhooks's "
        "in-process rollout (`legacy/cpu_rollout.py`: a generation batch in one batched decode, its rewards in the "
        "same process). V1 runs verl's own: per trajectory, in the agent-loop actor, a Hydra instantiate of the agent "
        "loop, a request through verl's router to the CPU rollout server, a reward call to a reward-loop worker and a "
        "TransferQueue put.",
    ]
    if "decode_ms_per_trajectory" in new:
        lines[-1] += (f" The server decodes for {new['decode_ms_per_trajectory']:.1f} of V1's "
                      f"{new['gen_ms_per_trajectory']:.1f} ms a trajectory (in more, smaller batches than the legacy "
                      "learner: requests reach it one after another); the rest of V1's generation is that "
                      "per-trajectory path.")
    lines[-1] += (" That path is verl's, the same on GPUs, and what a V1 run on the CPU learner is there to run. The "
                  "rest of the step is the same work on both (V1's through Ray actors and TransferQueue).")
    return lines


#: what each process of a V1 run on the CPU learner does, and whose code it runs
ROLES = {
    "ray::AgentLoopWorkerTQ": "verl's agent loop: per trajectory a Hydra instantiate, the request, the reward call, "
                              "a TransferQueue put",
    "ray::CPURolloutServer": "rlhooks's CPU rollout server: decoding",
    "ray::WorkerDict": "verl's actor worker: old log-probs, the update (the legacy step's work)",
    "ray::RewardLoopWorker": "verl's reward loop (the rlhooks reward functions inside)",
    "ray::TaskRunnerV1": "verl's trainer loop; rlhooks's replay buffer and hooks",
    "ray::TransferQueueController": "TransferQueue",
    "ray::SimpleStorageUnit": "TransferQueue",
    "ray::GlobalRequestLoadBalancer": "verl's request router",
    "driver (this process)": "the benchmark (`rlhooks train`'s driver)",
}


def _cpu_lines(runs: dict, legacy_step: float, machine: str) -> list[str]:
    v1, old = runs["v1"]["cpu"], runs["legacy"]["cpu"]
    v1_total, old_total = sum(v1["by_process"].values()), sum(old["by_process"].values())
    cores = int(machine.split(" cores")[0])  # the measuring machine's (``measure``), not this one's
    shown = {name: cpu for name, cpu in v1["by_process"].items() if cpu >= 0.05 and name in ROLES}
    rest = v1_total - sum(shown.values())
    lines = [
        "",
        f"CPU a step (user + system time of the benchmark and every process it started, read from `/proc` every "
        f"0.5 s; from the end of step 2 to the end of the last step: {v1['steps']} V1 steps in "
        f"{v1['wall_s']:.0f} s, {old['steps']} legacy steps in {old['wall_s']:.0f} s):",
        "",
        "| process (V1) | CPU-s a step | what it runs |",
        "| --- | ---: | --- |",
        *(f"| `{name}` | {cpu:.2f} | {ROLES[name]} |" for name, cpu in shown.items()),
        f"| the rest (Ray's own processes) | {rest:.2f} | |",
        f"| **V1, all** | **{v1_total:.2f}** | {v1_total * v1['steps'] / v1['wall_s']:.2f} cores busy on average |",
        f"| **legacy, all** (one process) | **{old_total:.2f}** | {old_total * old['steps'] / old['wall_s']:.2f} cores "
        "busy on average |",
        "",
        f"At that CPU a step, no overlap of the processes on {machine.split(',')[0]} makes a V1 step shorter than "
        f"{v1_total:.2f} / {cores} = {v1_total / cores:.2f} s, {v1_total / cores / legacy_step:.2f}x the legacy step "
        "(some of that CPU, Ray's and the polls', grows with the step's wall time).",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None, help="where the two runs go (a new folder; default: "
                    "runs/bench-cpu-step/<date-time>, so a rerun never meets the last one's run directories, which the "
                    "trainers refuse to splice into)")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    if args.steps < 3:
        ap.error("--steps must be at least 3 (the figure is the median of steps 2 onwards)")
    out = Path(args.out) if args.out else Path("runs/bench-cpu-step") / time.strftime("%Y%m%d-%H%M%S")
    result = measure(args.steps, out)
    text = markdown(result)
    print(text)
    if not args.no_write:
        (HERE / "CPU_STEP.json").write_text(json.dumps(result, indent=1))
        (HERE / "CPU_STEP.md").write_text(text)
        print("wrote benchmarks/CPU_STEP.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
