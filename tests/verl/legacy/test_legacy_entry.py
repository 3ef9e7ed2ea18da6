"""How the legacy trainer is reached: only through ``trainers.REMOVABLE`` (``rlhooks train trainer.use_v1=false``,
the CPU learner, the document's trainer names)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks.engines.verl.main import build_config, compose_verl_config  # noqa: E402

pytestmark = pytest.mark.verl


def test_the_documents_trainer_name_is_the_rlhooks_trainer():
    from rlhooks.engines.verl import RayPPOTrainerWithSampling as RayPPOTrainer
    from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer as VerlRayPPOTrainer

    assert RayPPOTrainer is RLHooksRayPPOTrainer and issubclass(RayPPOTrainer, VerlRayPPOTrainer)


def test_use_v1_false_runs_the_legacy_task_runner(monkeypatch):
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.engines.verl import main as rl_main
    from rlhooks.engines.verl.legacy.runner import RLHooksTaskRunner

    picked = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda cfg, task_runner_class: picked.append(task_runner_class))
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg: None)
    rl_main.run(build_config(None, ["trainer.use_v1=false"]))
    assert picked == [RLHooksTaskRunner]


def test_the_legacy_cpu_builder_refuses_a_v1_config(tmp_path):
    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.legacy import cpu_runner

    composed = compose_verl_config(runner.verl_overrides(tmp_path, tmp_path))  # verl's default: V1
    with pytest.raises(ValueError, match="set trainer.use_v1=false"):
        cpu_runner.build_trainer(composed)
