"""A Ray cluster of two nodes on this machine, started with Ray's own CLI as on a real cluster.

``ray start --head`` and ``ray start --address`` run as two processes (``--block``), each in its own
process group, with every port chosen free and every file under one temporary directory. Ray finds
"the latest cluster" through ``<temp dir>/ray_current_cluster``; ``RAY_TMPDIR`` points that lookup
into our directory, so no ``ray.init()`` of another process on this machine connects to this cluster.
Teardown signals only the two process groups started here (never ``ray stop``, which stops every Ray
on the machine) and removes the temporary directory.

Hermetic: every Ray this module starts (the two-node cluster, and ``local_ray`` in the test process) uses
token authentication with its own token (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), which Ray reads
before ``~/.ray/auth_token``: Ray 2.60 writes that file on a plain ``ray.init()``, and a token there
that the test's nodes did not share failed the worker node's join ("Authentication token is missing or
incorrect").
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: ``python -m`` rather than the ``ray`` script: a copied virtual environment's scripts can name another
#: interpreter in their first line, and the raylet starts workers with the interpreter that started it
RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]
#: single ports of one node: node manager, object manager, 2 dashboard agent, metrics, runtime env agent
NODE_PORTS = 6
#: what ``ray start`` prints once its node runs
READY = "Ray runtime started."


#: this test process's Ray token (Ray's C++ token loader reads it once per process, so one per process)
TEST_TOKEN = uuid.uuid4().hex


def hermetic_env() -> dict[str, str]:
    """Ray's settings that make a test's Ray its own: token auth with this process's token (not
    ``~/.ray/auth_token`` or a token path of the machine), no usage statistics."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TEST_TOKEN, "RAY_USAGE_STATS_ENABLED": "0"}


def lean_env() -> dict[str, str]:
    """Ray's worker pool for the tests' Rays: no Python worker started before one is needed. Ray starts idle
    workers for a new driver and for queued work that verl's actors (each with its runtime env) leave unused,
    ~2-3 CPU-s apiece on 2 cores (docs/DEVELOPMENT.md, "Tenth session"); Ray reads ``RAY_<setting>``."""
    return {"RAY_prestart_worker_first_driver": "0", "RAY_enable_worker_prestart": "0"}


def _without_ray_auth(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("RAY_AUTH_")}


#: ports each node's workers may use (``--min-worker-port`` to ``--max-worker-port``)
WORKER_PORTS = 51
#: where worker port ranges are taken from: below the kernel's ephemeral range (``ip_local_port_range``,
#: 32768-60999 by default), from which ``free_ports`` draws every single port, so the two never meet
WORKER_PORT_SPAN = (10000, 32000)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now (the kernel's choice: its ephemeral range)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_ranges(count: int, taken: set[int], size: int = WORKER_PORTS,
                     span: tuple[int, int] = WORKER_PORT_SPAN) -> list[int]:
    """First ports of ``count`` disjoint ranges of ``size`` consecutive ports in ``span``, each port free now and
    not in ``taken``. A worker range drawn from the kernel's choices could hold another chosen port (CI saw Ray
    refuse ``worker_ports 36081-36131`` holding the client server's 36129)."""
    rng = random.Random()
    starts: list[int] = []
    used = set(taken)
    for _ in range(200):
        start = rng.randrange(span[0], span[1] - size)
        block = range(start, start + size)
        if used.isdisjoint(block) and all(_port_free(p) for p in block):
            starts.append(start)
            used.update(block)
            if len(starts) == count:
                return starts
    raise RuntimeError(f"no {count} ranges of {size} free ports in {span} after 200 draws")


def _node_args(ports: list[int], worker_start: int) -> list[str]:
    return [
        "--node-manager-port", str(ports[0]), "--object-manager-port", str(ports[1]),
        "--min-worker-port", str(worker_start), "--max-worker-port", str(worker_start + WORKER_PORTS - 1),
        "--dashboard-agent-listen-port", str(ports[2]), "--dashboard-agent-grpc-port", str(ports[3]),
        "--metrics-export-port", str(ports[4]), "--runtime-env-agent-port", str(ports[5]),
        "--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--block",
    ]


class LocalRayCluster:
    """A running two-node cluster: its ``address``, ``root`` (every file of it), ``nodes``: the
    directory each node's ``ray start`` ran in (``head``, ``worker``), and ``env``: the nodes' environment."""

    def __init__(self, root: Path, address: str, nodes: dict[str, Path], env: Mapping[str, str]):
        self.root, self.address, self.nodes, self.env = root, address, nodes, dict(env)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to the process groups this module started, together (``ray start --block`` stops its
    node's processes on it), then, after 5 s, SIGKILL to what is left of them (some Ray processes take
    ~20 s to end on SIGTERM; the cluster's files are deleted anyway): only these groups, by their ids."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        alive = []
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
                alive.append(proc)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if _group_alive(p)]
            time.sleep(0.2)
        if not alive:
            return


def _group_alive(proc: subprocess.Popen) -> bool:
    proc.poll()  # reaps the leader once it exited
    try:
        os.killpg(proc.pid, 0)  # the group outlives its leader while one of its processes runs
        return True
    except ProcessLookupError:
        return False


@contextmanager
def local_ray_cluster(node_env: Mapping[str, str], *, head_cpus: int = 0, worker_cpus: int = 1,
                      timeout: float = 120) -> Iterator[LocalRayCluster]:
    """Head (``head_cpus`` CPUs: 0, as clusters often keep the head free of work) plus one worker node.

    ``node_env`` is the environment both nodes start with (and their workers inherit), as each node's
    environment on a real cluster."""
    root = Path(tempfile.mkdtemp(prefix="rlhray", dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = {**_without_ray_auth(node_env), **hermetic_env(), "RAY_TMPDIR": str(root)}
    ports = free_ports(2 + 2 * NODE_PORTS)
    worker_starts = free_port_ranges(2, set(ports))
    address = f"127.0.0.1:{ports[0]}"
    nodes = {"head": root / "head", "worker": root / "worker"}
    procs: list[subprocess.Popen] = []
    try:
        for name, args in (
            ("head", ["--head", "--port", str(ports[0]), "--num-cpus", str(head_cpus), "--include-dashboard", "false",
                      "--ray-client-server-port", str(ports[1]), *_node_args(ports[2:2 + NODE_PORTS], worker_starts[0])]),
            ("worker", ["--address", address, "--num-cpus", str(worker_cpus), *_node_args(ports[2 + NODE_PORTS:], worker_starts[1])]),
        ):
            nodes[name].mkdir()
            with open(root / f"{name}.out", "w") as out:  # the child keeps its own descriptor
                procs.append(subprocess.Popen(
                    [*RAY_CLI, "start", "--temp-dir", str(root / f"{name}-tmp"), *args], cwd=nodes[name], env=env,
                    start_new_session=True, stdout=out, stderr=subprocess.STDOUT,
                ))
            _wait_until_started(procs[-1], root / f"{name}.out", timeout)
        yield LocalRayCluster(root, address, nodes, env)
    finally:
        _stop(procs)
        shutil.rmtree(root, ignore_errors=True)


def _wait_until_started(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    """Until ``ray start`` says its node runs (it prints that once the node registered with the head)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if READY in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.3)
    raise RuntimeError(f"ray start did not start its node within {timeout} s:\n{log.read_text()}")


def _refresh_ray_config() -> None:
    """This process's Ray config re-read from the environment: it is read once, when ray first loads
    (tests/verl/conftest.py sets ``hermetic_env`` before that; this covers a test process that loaded Ray
    first), and Ray re-reads it the same way when it turns token authentication on."""
    from ray._raylet import Config

    Config.initialize("")


@contextmanager
def local_ray(init_kwargs: Mapping) -> Iterator[Path]:
    """``ray.init(**init_kwargs)`` in this process, hermetic: its own temporary directory (``_temp_dir``,
    ``RAY_TMPDIR``) and this process's token (``hermetic_env``; the environment is restored after);
    ``ray.shutdown()`` at the end stops the processes this ``ray.init`` started, and only those.
    Yields the temporary directory."""
    import ray

    if ray.is_initialized():
        raise RuntimeError("Ray already runs in this test process: a hermetic Ray needs its own start")
    root = Path(tempfile.mkdtemp(prefix="rlhray", dir="/tmp"))  # short: Ray's socket paths have a length limit
    changed = {**hermetic_env(), "RAY_TMPDIR": str(root)}
    saved = {k: os.environ.get(k) for k in [*changed, *[k for k in os.environ if k.startswith("RAY_AUTH_")]]}
    os.environ.update(changed)
    for key in [k for k in os.environ if k.startswith("RAY_AUTH_") and k not in changed]:
        del os.environ[key]  # e.g. RAY_AUTH_TOKEN_PATH of the machine
    _refresh_ray_config()
    try:
        _init(ray, {**dict(init_kwargs), "_temp_dir": str(root), "include_dashboard": False})
        try:
            yield root
        finally:
            ray.shutdown()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


#: ``ray.init`` tries: Ray gives its raylet 30 s to register with the GCS (hard-coded in ``ray/_private/node.py``),
#: which a 2-core machine under load from other test processes sometimes misses
RAY_INIT_TRIES = 2


def _init(ray, kwargs: Mapping) -> None:
    """``ray.init(**kwargs)``, once more where Ray's node timed out starting; the processes the failed start
    left (this process's children it started) are killed by their ids first."""
    import psutil

    me = psutil.Process()
    for attempt in range(1, RAY_INIT_TRIES + 1):
        before = {p.pid for p in me.children(recursive=True)}
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:
            if attempt == RAY_INIT_TRIES or "timed out during startup" not in str(exc):
                raise
            for proc in me.children(recursive=True):
                if proc.pid not in before:
                    try:
                        proc.kill()
                    except psutil.NoSuchProcess:
                        pass
            ray.shutdown()


#: the named CPU rollout servers a CPU-learner run starts (replica 1: separate_async's standalone one)
CPU_ROLLOUT_SERVERS = ("cpu_server_0_0", "cpu_server_1_0")


def release_run_resources(placement_groups_before: set[str], timeout: float = 120) -> None:
    """What ending an ``rlhooks train`` process would release, for the next run on a shared Ray: the CPU
    rollout servers its TaskRunner owned (they end with it; their names must be free again) and the
    placement groups verl made for it (they belong to the job: this process; verl names them alike each run)."""
    import ray
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import PlacementGroup

    deadline = time.monotonic() + timeout
    for name in CPU_ROLLOUT_SERVERS:
        while True:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run's rollout server {name} outlived its TaskRunner")
            time.sleep(0.5)
    for pg_id, info in placement_group_table().items():
        if pg_id not in placement_groups_before and info["state"] != "REMOVED":
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
