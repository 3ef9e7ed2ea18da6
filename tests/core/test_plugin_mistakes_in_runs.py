"""Plugin mistakes that used to run to "success": each planted in a real, pip-installed plugin
package and run through ``rlhooks simulate`` (in process, or as the CLI a user runs).

* a reward function that returns NaN for some rows;
* a hook and a filter that write into the batch they were handed;
* a sampler whose ``load_state_dict`` ignores its state (``--check-resume`` finds it).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import structlog.testing
import yaml

from rlhooks import PluginError
from rlhooks.cli import main
from rlhooks.engines.sim.resume_check import check_resume
from rlhooks.engines.sim.runs import simulate_run
from rlhooks.engines.verl.reward_function import compute_score

from ..reliability.conftest import read_jsonl
from ..installed_sites import pip_install, shared_site, write_dist

MISTAKES_CODE = '''
    import numpy as np

    from rlhooks import FilterDecision, Sampler, hookimpl


    def nan_for_some(response, target, **info):
        """Scores 1.0 for a right answer, but NaN for every response whose length is a multiple of 5."""
        if len(response) % 5 == 0:
            return float("nan")
        return 1.0 if f"<answer>{target}</answer>" in response else 0.0


    class Normalizer:
        """Centers the rewards in place: a write into the batch it was handed."""
        @hookimpl
        def on_rewards_computed(self, step, batch):
            rewards = batch["reward"]
            rewards -= rewards.mean()
            return {"normalizer/mean": float(rewards.mean())}


    class ClampingFilter:
        """Keeps every group, but first clamps the rewards it was handed in place."""
        def __init__(self, options=None):
            pass

        def select(self, batch):
            np.clip(batch["reward"], 0.0, 1.0, out=batch["reward"])
            return FilterDecision(np.ones(len(batch), dtype=bool))


    class Jitter:
        """Logs a metric drawn from an unseeded RNG: two identical runs differ."""
        def __init__(self):
            self.rng = np.random.default_rng()

        @hookimpl
        def on_step_end(self, step):
            return {"jitter/value": float(self.rng.random())}


    class TypoBackend:
        """A decorated hook implementation with a misspelled name."""
        @hookimpl
        def log_metric(self, step, metrics):
            pass


    class Walker(Sampler):
        """Walks a seeded permutation per epoch; state: the epoch and the position in it."""
        def __init__(self, options, data, *, batch_size, seed=0):
            super().__init__(options, data, batch_size=batch_size, seed=seed)
            self.epoch, self.pos = 0, 0

        def __len__(self):
            return len(self.data)

        def __iter__(self):
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.data))
            while self.pos < len(order):
                self.pos += 1
                yield int(order[self.pos - 1])
            self.epoch, self.pos = self.epoch + 1, 0

        def state_dict(self):
            return {"epoch": self.epoch, "pos": self.pos}

        def load_state_dict(self, state):
            self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


    class Forgetful(Walker):
        """Saves its position but ignores it when loaded: a resumed run starts the epoch again."""
        def load_state_dict(self, state):
            pass
'''


@pytest.fixture(scope="module")
def mistakes_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def install(root: Path) -> Path:
        src = write_dist(root, "mistake-plugins", "0.3", "mistake_plugins", MISTAKES_CODE, {
            "rlhooks.rewards": {"nan_for_some": "mistake_plugins:nan_for_some"},
            "rlhooks.plugins": {"normalizer": "mistake_plugins:Normalizer", "jitter": "mistake_plugins:Jitter"},
            "rlhooks.filters": {"clamping": "mistake_plugins:ClampingFilter"},
            "rlhooks.backends": {"typo_backend": "mistake_plugins:TypoBackend"},
            "rlhooks.samplers": {"walker": "mistake_plugins:Walker", "forgetful": "mistake_plugins:Forgetful"},
        })
        pip_install(root / "site", src)
        return root / "site"

    return shared_site(tmp_path_factory, "mistakes", install)


@pytest.fixture
def mistakes(mistakes_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(mistakes_site))
    importlib.invalidate_caches()
    return mistakes_site


def write_config(tmp_path: Path, **sections) -> Path:
    cfg = {
        "run": {"name": "mistake", "steps": 3, "n": 4, "train_batch_size": 4, "gen_batch_size": 6, "seed": 1,
                "out_dir": str(tmp_path / "runs")},
        "simulate": {"rows_per_source": 40, "eval_items": 16},
        "rewards": ["check_answer"],
        "backends": ["jsonl"],
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# -- non-finite reward scores ------------------------------------------------------------------


def test_a_reward_function_returning_nan_is_counted_named_and_kept_out_of_the_advantages(tmp_path, mistakes):
    config = write_config(tmp_path, rewards=["check_answer", {"name": "nan_for_some", "error_score": -1.0}])
    with structlog.testing.capture_logs() as logs:
        summary = simulate_run(config, report=False)
    assert summary["status"] == "success"
    records = [r for r in read_jsonl(tmp_path / "runs" / "mistake" / "metrics.jsonl") if r["kind"] == "metrics"]
    assert len(records) == 3
    counted = [r["metrics"]["rewards/nonfinite_scores/nan_for_some"] for r in records]
    assert all(c > 0 for c in counted)
    for r in records:  # the NaN rows count as errors too; the trained batch never saw a NaN
        assert r["metrics"]["rewards/errors/nan_for_some"] == r["metrics"]["rewards/nonfinite_scores/nan_for_some"]
        assert np.isfinite(r["metrics"]["critic/advantages/mean"]) and "critic/advantages/mean" not in r.get("nonfinite", {})
    warned = [e for e in logs if "returned NaN or inf" in e["event"]]
    assert len(warned) == 1 and warned[0]["event"].startswith("reward function 'nan_for_some' returned NaN or inf for ")
    assert "score error_score=-1.0" in warned[0]["event"]


def test_the_verl_adapter_treats_a_registered_functions_nan_like_a_raise(mistakes):
    response = "<reasoning>r</reasoning><answer>4</answer>xxx"  # 45 characters: NaN
    assert len(response) % 5 == 0
    out = compute_score("src", response, "4", functions=["nan_for_some", "format_exact"], error_score=-2.0)
    assert out["nan_for_some"] == -2.0 and out["reward_errors"] == 1.0 and np.isfinite(out["score"])


# -- writes into the batch -------------------------------------------------------------------------


def test_a_hook_writing_into_the_batch_is_stopped_and_named(tmp_path, mistakes):
    config = write_config(tmp_path, plugins=[{"name": "normalizer", "on_error": "raise"}])
    with pytest.raises(PluginError) as e:
        simulate_run(config, report=False)
    msg = str(e.value)
    assert msg.startswith("plugin 'normalizer' from mistake-plugins 0.3 failed in on_rewards_computed: "
                          "ValueError: output array is read-only")
    assert "mistake_plugins/__init__.py" in msg and "rewards -= rewards.mean()" in msg
    assert "batch columns are read-only for every hook and filter: copy a column before changing it" in msg
    assert "a bug in mistake-plugins 0.3" in msg


def test_a_filter_writing_into_the_batch_fails_the_run_naming_it(tmp_path, mistakes):
    config = write_config(tmp_path, filters=["clamping"])
    with pytest.raises(PluginError, match=r"plugin 'clamping' from mistake-plugins 0\.3 failed in select: "
                                          r"ValueError: output array is read-only") as e:
        simulate_run(config, report=False)
    assert "np.clip(batch[\"reward\"], 0.0, 1.0, out=batch[\"reward\"])" in str(e.value)


def test_under_on_error_warn_the_write_is_refused_and_the_run_goes_on(tmp_path, mistakes):
    config = write_config(tmp_path, plugins=[{"name": "normalizer", "on_error": "warn"}])
    with structlog.testing.capture_logs() as logs:
        summary = simulate_run(config, report=False)
    (label, info), = summary["plugin_failures"].items()
    assert "normalizer" in label and list(info["by_hook"]) == ["on_rewards_computed"] and info["failures"] >= 3
    failed = [e for e in logs if e["event"].startswith("plugin 'normalizer' failed in on_rewards_computed")]
    assert failed and failed[0]["hint"].startswith("batch columns are read-only")
    records = [r for r in read_jsonl(tmp_path / "runs" / "mistake" / "metrics.jsonl") if r["kind"] == "metrics"]
    # had the in-place write gone through, the hook would have returned its metric
    assert len(records) == 3 and not any("normalizer/mean" in r["metrics"] for r in records)


def test_the_cli_prints_one_message_with_the_plugins_frames_and_no_locals(tmp_path, mistakes, capsys):
    config = write_config(tmp_path, plugins=[{"name": "normalizer", "on_error": "raise"}])
    assert main(["simulate", str(config), "--no-progress", "--no-report"]) == 1  # the console script's entry
    err = capsys.readouterr().err
    assert "Traceback" not in err and "locals" not in err.lower()
    start = err.index("error: plugin 'normalizer' from mistake-plugins 0.3 failed in on_rewards_computed")
    lines = err[start:].rstrip().splitlines()
    assert lines[1] == "  in the plugin's code (innermost last):"
    assert lines[2].endswith("in on_rewards_computed: rewards -= rewards.mean()")
    assert lines[3].startswith("  (batch columns are read-only") and len(lines) == 4


# -- a misspelled, decorated hook ----------------------------------------------------------------


def test_a_misspelled_hook_is_named_with_did_you_mean_and_the_plugin_not_its_repr(tmp_path, mistakes, capsys):
    config = write_config(tmp_path, backends=["jsonl", "typo_backend"])
    assert main(["simulate", str(config), "--no-progress", "--no-report"]) == 1
    err = capsys.readouterr().err
    assert ("error: backend 'typo_backend' (mistake-plugins 0.3) at backends[1] does not match the hook contract: "
            "method 'log_metric' is decorated with @hookimpl but is not an rlhooks hook; did you mean 'log_metrics'?") in err
    assert " object at 0x" not in err and "Traceback" not in err


# -- a sampler that ignores its state: rlhooks simulate --check-resume ---------------------------


def test_check_resume_catches_a_sampler_whose_load_state_dict_ignores_its_state(tmp_path, mistakes, capsys):
    config = write_config(tmp_path, sampler={"name": "forgetful"}, run={
        "name": "resume", "steps": 5, "n": 4, "train_batch_size": 4, "gen_batch_size": 6, "seed": 1,
        "out_dir": str(tmp_path / "runs")})
    assert main(["simulate", str(config), "--check-resume", "2", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("resume check FAILED: resumed at step 2, the run diverges from the uninterrupted one: "
                          "step 3 (generation batch 1) sampled other prompts: dataset rows [")
    assert "state_dict()/load_state_dict() does not capture or restore everything" in err
    assert not (tmp_path / "runs").exists()  # the check writes no run directory


def test_check_resume_passes_a_sampler_that_restores_its_state(tmp_path, mistakes, capsys):
    config = write_config(tmp_path, sampler={"name": "walker"}, filters=["dapo"])
    assert main(["simulate", str(config), "--steps", "5", "--check-resume", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == ("resume check passed: resumed at step 2, steps 3-5 equal the uninterrupted run "
                           "(3 steps: sampled prompts and every metric but timing/*)")


def test_check_resume_tells_a_run_that_is_not_seeded_from_one_that_does_not_resume(tmp_path, mistakes):
    check = check_resume(write_config(tmp_path, plugins=["jitter"]), 2, ["run.steps=4"])
    assert not check.ok and check.nondeterministic
    assert check.verdict().startswith("resume check inconclusive: two identical runs already differ before step 2, "
                                      "without any resume: step 1 logged other metrics: jitter/value = ")


def test_check_resume_needs_steps_after_k(tmp_path, mistakes, capsys):
    assert main(["simulate", str(write_config(tmp_path)), "--check-resume", "3"]) == 1
    assert ("error: --check-resume 3: K must be at least 1 and below run.steps (3), so that steps after K are "
            "compared; raise --steps or lower K") in capsys.readouterr().err
