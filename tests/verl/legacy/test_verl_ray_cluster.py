"""`rlhooks train` on a Ray cluster of two nodes (docs/how-to/verl.md, "On a Ray cluster").

Two ``ray start`` processes on this machine (ray_cluster.py): a head with no CPUs, as clusters often
keep it, and a worker node, both with the example plugin package installed (its site directory on
their PYTHONPATH, as an install on every node). ``rlhooks train`` runs from a third directory with
``RAY_ADDRESS`` set, so verl's ``run_ppo`` joins the cluster and Ray places the TaskRunner on the
worker node. Inside it, verl's own ``TaskRunner.run`` builds tokenizer, datasets and resource pool
spec; only the GPU workers are CPU stand-ins (cluster_standins.py, through Ray's runtime_env
``worker_process_setup_hook``). Checked: the TaskRunner finds the plugin's entry points (its reward
function scores, its backend writes), writes the run directory and ``rlhooks.pt`` where the guide
says, sees the driver's ``RLHOOKS_*`` variables, and warns about a relative ``run.out_dir``.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")
pytest.importorskip("ray", reason="needs ray (verl[verl-core])")

from .cluster_standins import PROBE_ENV  # noqa: E402
from ..ray_cluster import LocalRayCluster, hermetic_env, local_ray_cluster  # noqa: E402
from ..verl_shim_helpers import WORDS, make_tokenizer, write_dataset  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "rlhooks-example-plugin"
NAME = "cluster-run"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin package really installed (pip, from a copy) into a site directory."""
    pytest.importorskip("setuptools", reason="the example package builds with the venv's setuptools")
    src = tmp_path_factory.mktemp("example-src") / EXAMPLE.name
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    site = tmp_path_factory.mktemp("example-site")
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q",
                          "--disable-pip-version-check", "--target", str(site), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"pip install of the example plugin failed:\n{res.stdout}\n{res.stderr}"
    return site


@pytest.fixture(scope="module")
def stray_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home directory holding a ``~/.ray/auth_token`` of another Ray (what Ray 2.60's plain ``ray.init()``
    leaves behind): nodes and driver run with it, and the test's own token must win."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("a-token-of-another-local-ray")
    return home


@pytest.fixture(scope="module")
def cluster(plugin_site: Path, stray_home: Path) -> Iterator[LocalRayCluster]:
    # each node's own environment: the plugin installed (PYTHONPATH), the tests package for the stand-ins,
    # and none of the driver's RLHOOKS_* variables (they must arrive through runtime_env)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLHOOKS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_site), str(ROOT)])
    env["HOME"] = str(stray_home)
    with local_ray_cluster(env) as running:
        yield running


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What verl's TaskRunner loads by path: a model config (no weights) and the test tokenizer."""
    from transformers import Qwen2Config

    root = tmp_path_factory.mktemp("model")
    # the tokenizer in its own directory: next to a config.json of model_type qwen2, AutoTokenizer would
    # load a Qwen2Tokenizer over the WordLevel vocabulary (wrong ids)
    make_tokenizer().save_pretrained(root / "tokenizer")
    model = Qwen2Config(vocab_size=len(WORDS), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                        num_attention_heads=1, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"])
    model.save_pretrained(root / "model")
    return {"model": root / "model", "tokenizer": root / "tokenizer",
            "data": write_dataset(root / "train.parquet", 24)}


def train(cluster: LocalRayCluster, plugin_site: Path, model_files: dict[str, Path], work: Path,
          out_dir: str, checkpoints: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``rlhooks --log-json train`` from ``work/launch`` (the driver's directory) with RAY_ADDRESS set."""
    launch = work / "launch"
    launch.mkdir()
    config = launch / "rlhooks.yaml"
    config.write_text(json.dumps({
        "run": {"out_dir": out_dir},
        # the plugin's reward function, scored in the TaskRunner: 1.0 up to 8 characters, 0.0 at 16
        "rewards": [{"name": "length_penalty", "max_chars": 8}],
        "backends": ["jsonl", {"name": "csv", "flush_every": 1}],  # the plugin's backend
        "verl": {
            "data": {"train_files": str(model_files["data"]), "val_files": str(model_files["data"]),
                     "train_batch_size": 2, "gen_batch_size": 2, "dataloader_num_workers": 0,
                     "filter_overlong_prompts": False, "shuffle": False},
            "actor_rollout_ref": {"model": {"path": str(model_files["model"]),
                                            "tokenizer_path": str(model_files["tokenizer"])},
                                  "rollout": {"n": 2, "log_prob_micro_batch_size_per_gpu": 2,
                                              "agent": {"num_workers": 1}},
                                  "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2,
                                            "use_kl_loss": False}},
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
            "trainer": {"use_v1": False,  # the CPU stand-ins (cluster_standins.py) are legacy-trainer workers
                        "logger": ["console"], "total_training_steps": 2, "total_epochs": 1, "save_freq": 2,
                        "test_freq": -1, "val_before_train": False, "n_gpus_per_node": 1,
                        "experiment_name": NAME, "default_local_dir": checkpoints},
        },
    }))
    probe = work / "probe.json"
    # the driver: the cluster's token (conftest put the test's token in os.environ) and the stray ~/.ray
    env = {**os.environ, "RAY_ADDRESS": cluster.address, "PYTHONPATH": str(plugin_site),
           "RAY_TMPDIR": str(cluster.root), "HOME": cluster.env["HOME"], **hermetic_env()}
    env.pop("RLHOOKS_LOG_JSON", None)
    res = subprocess.run(
        [sys.executable, "-m", "rlhooks.cli", "--log-json", "train", "--config", str(config),
         "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=tests.verl.legacy.cluster_standins.install",
         f"+ray_kwargs.ray_init.runtime_env.env_vars.{PROBE_ENV}={probe}"],
        cwd=launch, env=env, capture_output=True, text=True, timeout=400,
    )
    output = res.stdout + res.stderr
    verl_log = Path(out_dir) / NAME / "verl.log"  # an absolute run directory: Ray's forwarded lines are there
    if verl_log.is_file():
        output += verl_log.read_text()
    assert res.returncode == 0, output[-6000:]
    assert "Authentication token is missing or incorrect" not in output
    return res, json.loads(probe.read_text())


def _read_csv_metrics(path: Path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0].isdigit():
                out.setdefault(int(row[0]), {})[row[1]] = float(row[2])
    return out


def test_taskrunner_on_a_worker_node_finds_plugins_and_writes_where_the_guide_says(
        cluster, plugin_site, model_files, tmp_path):
    shared = tmp_path / "shared" / "runs"  # an absolute run.out_dir, as the guide asks
    res, probe = train(cluster, plugin_site, model_files, tmp_path, str(shared), str(tmp_path / "checkpoints"))
    output = res.stdout + res.stderr

    # Ray placed the TaskRunner on the worker node (the head has no CPU), not where rlhooks train ran
    assert probe["head"] is False and probe["actor_id"]
    assert probe["trainer"] == "RLHooksRayPPOTrainer"
    # the driver's RLHOOKS_* variables reached it through runtime_env (the nodes were started without them)
    assert probe["env"].get("RLHOOKS_LOG_JSON") == "1"

    run_dir = shared / NAME
    # the plugin's backend (an entry point of the installed package) wrote into the run directory ...
    metrics = _read_csv_metrics(run_dir / "metrics.csv")
    assert sorted(metrics) == [1, 2]
    # ... and the plugin's reward function scored in the TaskRunner, replacing verl's score: the stand-in
    # answers 'hard' prompts wrong (acc 0) with "the answer is 0" (15 chars: 0.125) or "answer 0" (1.0)
    for step in (1, 2):
        if "source/hard/acc" in metrics[step]:
            assert metrics[step]["source/hard/acc"] == 0.0
            assert metrics[step]["source/hard/reward"] == pytest.approx((0.125 + 1.0) / 2)
    assert any("source/hard/acc" in m for m in metrics.values())
    assert (run_dir / "metrics.jsonl").is_file()
    # rlhooks.pt next to verl's data.pt in trainer.default_local_dir, written by the TaskRunner
    assert (tmp_path / "checkpoints" / "global_step_2" / "rlhooks.pt").is_file()
    assert not (tmp_path / "launch" / "runs").exists()
    assert "is relative" not in output


def test_a_relative_out_dir_on_a_cluster_warns_with_the_absolute_path(cluster, plugin_site, model_files, tmp_path):
    res, probe = train(cluster, plugin_site, model_files, tmp_path, "runs", "checkpoints")
    output = res.stdout + res.stderr
    # resolved in the TaskRunner, against the directory its node's `ray start` ran in
    assert probe["cwd"] == str(cluster.nodes["worker"])
    written = Path(probe["cwd"]) / "runs" / NAME
    checkpoints = Path(probe["cwd"]) / "checkpoints"
    # JSON lines (rlhooks --log-json reached the TaskRunner), streamed by Ray to the driver's console
    warnings = {w["event"].split(" ")[0]: w["event"] for w in (json.loads(line[line.index("{"):])
                for line in output.splitlines() if " is relative (" in line and "{" in line)}
    assert set(warnings) == {"rlhooks.run.out_dir", "trainer.default_local_dir"}, output[-4000:]
    node = f" on {probe['ip']} (Ray node {probe['node_id'][:12]})"
    assert f"the rlhooks run directory is {written}{node}" in warnings["rlhooks.run.out_dir"]
    assert (f"the checkpoint directory (verl's checkpoints, rlhooks.pt) is {checkpoints}{node}"
            in warnings["trainer.default_local_dir"])
    assert all("an absolute path on storage every node can reach" in w for w in warnings.values())
    assert (written / "metrics.csv").is_file()
    assert (checkpoints / "global_step_2" / "rlhooks.pt").is_file()
    assert not (tmp_path / "launch" / "runs").exists()  # not where rlhooks train ran
    for made in (written.parent, checkpoints):  # what this test made in the node's working directory
        shutil.rmtree(made)
