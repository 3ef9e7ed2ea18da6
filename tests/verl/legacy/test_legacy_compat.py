"""Drift against verl for the legacy trainer: what it restates and calls is fingerprinted, and checked first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks.engines.verl import compat, legacy  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

pytestmark = pytest.mark.verl
LEGACY = Path(legacy.__file__).parent


def test_fingerprints_cover_what_the_shim_relies_on_outside_self_members():
    relied = set(compat.RELIED_ON)
    for name in ("verl.trainer.ppo.ray_trainer:RayPPOTrainer.init_workers",
                 "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
                 "verl.checkpoint_engine:CheckpointEngineManager.update_weights",
                 "verl.trainer.ppo.metric_utils:compute_data_metrics", "verl.protocol:DataProto.select_idxs"):
        assert name in relied, name
    # every verl function the trainer module imports by name is fingerprinted
    import ast

    tree = ast.parse((LEGACY / "trainer.py").read_text())
    imported = {f"{n.module}:{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("verl.") for a in n.names if a.name[0].islower()}
    fingerprinted = {q for q in relied}
    assert imported - fingerprinted - {"verl.trainer.ppo.utils:create_rl_dataset", "verl.utils.debug:marked_timer"} == set()


def test_every_verl_member_the_shim_calls_is_fingerprinted():
    """A new self._x call on a RayPPOTrainer method must be added to compat.RELIED_ON."""
    source = (LEGACY / "trainer.py").read_text()
    used = set(re.findall(r"(?:self|super\(\))\.(_[A-Za-z]\w*)", source))
    from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer

    verl_members = {n for n in used if hasattr(RayPPOTrainer, n)}
    recorded = {q.rsplit(".", 1)[1] for q in compat.RELIED_ON if ":RayPPOTrainer." in q}
    assert verl_members - recorded == set(), "fingerprint these in compat.RELIED_ON"
    assert {"_compute_old_log_prob", "_update_actor", "_balance_batch", "_load_checkpoint"} <= verl_members
    own = set(vars(RLHooksRayPPOTrainer))
    assert {"fit", "_create_dataloader", "_save_checkpoint", "_load_checkpoint"} <= own  # the overridden ones


def test_the_trainer_checks_verl_before_anything_else(monkeypatch):
    from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer

    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    monkeypatch.setattr(compat, "fingerprints",
                        lambda trainer=None, source=None: {"verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit": "0" * 16})
    with pytest.raises(compat.UnsupportedVerlError, match="differs from every reviewed verl"):
        RLHooksRayPPOTrainer(config=None)


def test_the_check_follows_the_trainer_in_use_so_a_verl_without_the_legacy_trainer_runs_v1(monkeypatch):
    """The members of the legacy trainer missing (a verl that dropped it): V1 is checked and runs, the legacy
    trainer is refused by name."""
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    installed = compat.compare(compat.fingerprints())[1]  # "0.9.1", or verl main's label when it is installed
    real_node = compat._node

    def without_legacy(source, name):
        if name in legacy.RELIED_ON:
            raise LookupError(name)
        return real_node(source, name)

    monkeypatch.setattr(compat, "_node", without_legacy)
    v1 = compat.fingerprints("v1")
    assert not set(v1) & set(legacy.RELIED_ON) and set(compat.V1_RELIED_ON) <= set(v1)
    assert compat.check_verl("0.9.1", trainer="v1") == "0.9.1"
    with pytest.raises(compat.UnsupportedVerlError, match=rf"changed since verl {re.escape(installed)}: .*RayPPOTrainer\.fit"):
        compat.check_verl("0.9.1", trainer="legacy")


#: the legacy trainer's overrides of verl methods that do not call them, each saying why (``# not verl's:``)
LEGACY_NOT_CALLING_VERL = {
    "legacy.trainer:RLHooksRayPPOTrainer.fit",  # the legacy trainer restates verl's fit (fingerprinted)
    "legacy.trainer:RLHooksRayPPOTrainer._save_checkpoint",
    "legacy.cpu_trainer:CPULearnerTrainer.init_workers",  # the legacy CPU learner's in-process workers
}


def test_each_legacy_override_of_a_verl_method_calls_it_or_says_why_not():
    import inspect

    from ..test_verl_compat import _verl_overrides, not_calling_verl

    overrides = _verl_overrides()
    not_calling = {key for key in not_calling_verl(overrides) if key.startswith("legacy.")}
    assert not_calling == LEGACY_NOT_CALLING_VERL, "call verl's method and adjust its result, or say why not"
    for key in not_calling:
        assert "# not verl's:" in inspect.getsource(overrides[key][0]), f"{key}: say why it does not call verl's"
