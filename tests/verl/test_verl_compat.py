"""Drift against verl: the supported range at start-up, and a fingerprint of the verl code the shim relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks.cli import main as rlhooks_main  # noqa: E402
from rlhooks.engines.verl import compat  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

pytestmark = pytest.mark.verl
SHIM = Path(compat.__file__).parent


def test_installed_verl_matches_its_recorded_fingerprint():
    version = compat.installed_verl_version()
    known = compat.recorded().get(version)
    assert known is not None, (
        f"no fingerprints recorded for the installed verl {version}: review rlhooks/engines/verl/legacy/trainer.py against "
        f"this verl's RayPPOTrainer.fit() and the members in compat.RELIED_ON, then run `{compat.RECORD_COMMAND}`"
    )
    now = compat.fingerprints()
    changed = sorted(n for n in set(now) | set(known) if now.get(n) != known.get(n))
    assert not changed, (
        f"verl {version} code the rlhooks trainer restates or calls changed since it was reviewed: {changed}. "
        f"Diff each against the reviewed version, port the change into rlhooks/engines/verl/legacy/trainer.py (fit() is "
        f"restated there step by step), then run `{compat.RECORD_COMMAND}`"
    )
    # absent only where a supported verl lacks it (read with getattr), as recorded
    assert {n for n, v in now.items() if v == "missing"} <= compat.VERSION_DEPENDENT


def test_fingerprints_cover_what_the_shim_relies_on_outside_self_members():
    relied = set(compat.RELIED_ON)
    for name in ("verl.trainer.ppo.ray_trainer:RayPPOTrainer.init_workers",
                 "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
                 "verl.checkpoint_engine:CheckpointEngineManager.update_weights",
                 "verl.trainer.ppo.metric_utils:compute_data_metrics", "verl.protocol:DataProto.select_idxs"):
        assert name in relied, name
    # every verl function the trainer module imports by name is fingerprinted
    import ast

    tree = ast.parse((SHIM / "legacy" / "trainer.py").read_text())
    imported = {f"{n.module}:{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("verl.") for a in n.names if a.name[0].islower()}
    fingerprinted = {q for q in relied}
    assert imported - fingerprinted - {"verl.trainer.ppo.utils:create_rl_dataset", "verl.utils.debug:marked_timer"} == set()


def test_every_verl_member_the_shim_calls_is_fingerprinted():
    """A new self._x call on a RayPPOTrainer method must be added to compat.RELIED_ON."""
    source = (SHIM / "legacy" / "trainer.py").read_text()
    used = set(re.findall(r"(?:self|super\(\))\.(_[A-Za-z]\w*)", source))
    from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer

    verl_members = {n for n in used if hasattr(RayPPOTrainer, n)}
    recorded = {q.rsplit(".", 1)[1] for q in compat.RELIED_ON if ":RayPPOTrainer." in q}
    assert verl_members - recorded == set(), "fingerprint these in compat.RELIED_ON"
    assert {"_compute_old_log_prob", "_update_actor", "_balance_batch", "_load_checkpoint"} <= verl_members
    own = set(vars(RLHooksRayPPOTrainer))
    assert {"fit", "_create_dataloader", "_save_checkpoint", "_load_checkpoint"} <= own  # the overridden ones


def test_a_changed_member_is_named_and_refused_unless_opted_in(monkeypatch):
    real = compat.fingerprints()
    name = "verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit"
    monkeypatch.setattr(compat, "fingerprints", lambda trainer=None, source=None: {**real, name: "0" * 16})
    assert compat.compare(compat.fingerprints()) == ([], "0.9.1", [name])
    assert compat.main([]) == 1
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    for version in ("0.9.1", "0.10.0"):  # in the tested range or not: the code decides
        with pytest.raises(compat.UnsupportedVerlError, match=rf"verl {version}: the verl code the rlhooks trainer "
                                                              rf"relies on differs .*changed since verl 0\.9\.1: {name}"):
            compat.check_verl(version)
    monkeypatch.setenv(compat.ALLOW_ENV, "1")
    assert compat.check_verl("0.10.0") == "0.10.0"  # a warning instead


@pytest.mark.parametrize("version", ["0.9.1", "0.9.2", "0.10.0.dev0", "0.10.0", "1.0.0", "not-a-version"])
def test_matching_fingerprints_run_whatever_the_version(version, monkeypatch, capsys):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    assert compat.check_verl(version) == version
    out = "".join(capsys.readouterr())
    if compat.in_tested_range(version):
        assert "outside the tested range" not in out
    else:
        assert f"verl {version} is outside the tested range >=0.9.1,<0.10" in out and "fingerprints match" in out


def test_the_pin_allows_the_next_minor_that_fingerprints_decide():
    import tomllib

    pyproject = tomllib.loads((SHIM.parents[2] / "pyproject.toml").read_text())
    verl_extra = pyproject["project"]["optional-dependencies"]["verl"]
    assert [r for r in verl_extra if r.startswith("verl")] == ["verl[verl-core]>=0.9.1,<0.11"]
    # the CPU learner's own (verl needs them too): engines/verl/cpu
    assert sorted(r.split(">")[0] for r in verl_extra if not r.startswith("verl")) == ["tokenizers", "transformers"]


def test_rlhooks_train_refuses_changed_verl_code_at_start(monkeypatch, capsys):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    real = compat.fingerprints()
    name = "verl.protocol:DataProto.select_idxs"
    monkeypatch.setattr(compat, "fingerprints", lambda trainer=None, source=None: {**real, name: "missing"})
    assert rlhooks_main(["train", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"changed since verl 0.9.1: {name}" in err
    assert "Traceback" not in err and "AttributeError" not in err
    monkeypatch.setattr(compat, "installed_verl_version", lambda: None)
    assert rlhooks_main(["train", "--dry-run"]) == 1
    assert "verl is not installed" in capsys.readouterr().err


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
    real_node = compat._node

    def without_legacy(source, name):
        if name in compat.LEGACY_RELIED_ON:
            raise LookupError(name)
        return real_node(source, name)

    monkeypatch.setattr(compat, "_node", without_legacy)
    v1 = compat.fingerprints("v1")
    assert not set(v1) & set(compat.LEGACY_RELIED_ON) and set(compat.V1_RELIED_ON) <= set(v1)
    assert compat.check_verl("0.9.1", trainer="v1") == "0.9.1"
    with pytest.raises(compat.UnsupportedVerlError, match=r"changed since verl 0\.9\.1: .*RayPPOTrainer\.fit"):
        compat.check_verl("0.9.1", trainer="legacy")


def test_config_defaults_are_fingerprinted_like_code(monkeypatch):
    """verl main's algorithm.filter_groups.metric default is null (0.9.1: reward): a changed default the
    rlhooks mapping relies on is refused at start-up, named like a changed member."""
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    defaults = compat.config_defaults("v1")
    assert defaults["config:algorithm.filter_groups.metric"] == '"reward"'
    assert defaults["config:trainer.use_v1"] == "true" and defaults["config:trainer.v1.trainer_mode"] == '"sync"'
    changed = dict(defaults, **{"config:algorithm.filter_groups.metric": "null"})
    monkeypatch.setattr(compat, "_config_defaults", lambda trainer, root: tuple(changed.items()))
    with pytest.raises(compat.UnsupportedVerlError,
                       match=r"changed since verl 0\.9\.1: config:algorithm\.filter_groups\.metric\."):
        compat.check_verl("0.10.0.dev0", trainer="v1")


def test_every_verl_member_the_v1_trainer_overrides_is_fingerprinted():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer
    from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync

    for ours, theirs, prefix in ((RLHooksPPOTrainerSync, PPOTrainer, "verl.trainer.ppo.v1.trainer_base:PPOTrainer."),
                                 (RLHooksReplayBuffer, ReplayBuffer, "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.")):
        overridden = {n for n in vars(ours) if n.startswith("_") and not n.startswith("__") and callable(getattr(theirs, n, None))}
        overridden |= {n for n in ("__init__", "fit", "sample") if n in vars(ours)}
        assert overridden and {prefix + n for n in overridden} <= set(compat.V1_RELIED_ON), overridden
