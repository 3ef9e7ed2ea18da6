"""The CPU learner's files (issue 29, items 5 and 7): ``prepare`` never replaces what it did not write nor
writes through a link; a policy or prompt file the learner cannot use is one message naming the file,
the key and the expected layout, before verl or transformers read it.

In-process and fast: ``prepare`` copies the shipped policy (no training), the checks read file headers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from rlhooks.core.errors import ConfigError
from rlhooks.engines.verl.cpu import policy, runner, tasks
from rlhooks.engines.verl.cpu.__main__ import main as prepare_main


def _prepare(directory: Path, capsys) -> tuple[int, str]:
    code = prepare_main(["prepare", str(directory)])
    return code, capsys.readouterr().err


# -- item 5: prepare refuses what it did not write --------------------------------------------------
def test_prepare_refuses_a_policy_directory_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "policy"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"my fine-tuned weights")
    (mine / "config.json").write_text('{"model_type": "llama"}')
    code, err = _prepare(tmp_path, capsys)
    assert code == 1 and "Traceback" not in err
    assert f"{mine} holds files prepare did not write (no {policy.RECIPE_FILE}: config.json, model.safetensors)" in err
    assert "Prepare into another directory" in err
    assert (mine / "model.safetensors").read_bytes() == b"my fine-tuned weights"
    assert not (tmp_path / "train.parquet").exists()  # refused before anything was written


def test_prepare_never_writes_through_a_link_inside_its_own_policy_directory(tmp_path, capsys):
    assert _prepare(tmp_path, capsys)[0] == 0
    victim = tmp_path / "victim.json"
    victim.write_text("a user's file")
    tokenizer = tmp_path / "policy" / "tokenizer.json"
    tokenizer.unlink()
    tokenizer.symlink_to(victim)  # planted in the directory prepare owns
    marker = tmp_path / "policy" / policy.RECIPE_FILE
    marker.write_text(json.dumps({"digest": "another recipe"}))  # so prepare rebuilds rather than reuses
    assert _prepare(tmp_path, capsys)[0] == 0
    assert victim.read_text() == "a user's file"  # shutil.copy2 used to write the tokenizer through the link
    assert not tokenizer.is_symlink() and json.loads(tokenizer.read_text())["model"]


@pytest.mark.parametrize("link", ["policy", "train.parquet"])
def test_prepare_refuses_a_link_at_its_targets(tmp_path, capsys, link):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "thing"
    if link == "policy":
        target.mkdir()
    else:
        target.write_text("a user's data")
    out = tmp_path / "out"
    out.mkdir()
    (out / link).symlink_to(target)
    code, err = _prepare(out, capsys)
    assert code == 1 and f"{out / link} is a symbolic link" in err
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["thing"]
    assert target.is_dir() or target.read_text() == "a user's data"


def test_prepare_refuses_a_prompt_file_it_did_not_write_and_reruns_over_its_own(tmp_path, capsys):
    assert _prepare(tmp_path, capsys)[0] == 0
    assert _prepare(tmp_path, capsys)[0] == 0  # its own files: reused / rewritten
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": ["my data"]}), data)
    code, err = _prepare(tmp_path, capsys)
    assert code == 1 and f"{data} exists and prepare did not write it" in err
    assert pq.read_table(data).column("prompt").to_pylist() == ["my data"]


def test_prepare_takes_over_the_prompts_an_earlier_rlhooks_wrote_without_a_marker(tmp_path):
    data = tmp_path / "train.parquet"
    pq.write_table(tasks._table(tuple(tasks.SOURCES)), data)  # what prepare wrote before the marker existed
    tasks.write_dataset(data)
    assert pq.read_schema(data).metadata.get(b"rlhooks") == b"cpu-learner-tasks"


class Killed(BaseException):
    """A kill at a rename: nothing after it runs."""


def test_a_prepare_killed_while_installing_the_policy_leaves_none_or_a_whole_one(tmp_path, capsys, monkeypatch):
    """The files were renamed into a new policy/ one by one, the marker last: a kill between left policy/
    without the marker, which every later prepare refused as "files prepare did not write"."""
    real_replace = os.replace
    for kill_at in range(2):  # at the first rename, and at the second (the file-by-file install)
        calls = []

        def replace(src, dst, *, _k=kill_at, _calls=calls):
            _calls.append(dst)
            if len(_calls) - 1 == _k:
                raise Killed(dst)
            return real_replace(src, dst)

        target = tmp_path / str(kill_at)
        with monkeypatch.context() as mp:
            mp.setattr(os, "replace", replace)
            try:
                policy.build_policy(target / "policy")
            except Killed:
                pass
        assert not (target / "policy").exists() or (target / "policy" / policy.RECIPE_FILE).is_file(), kill_at
        code, err = _prepare(target, capsys)
        assert code == 0, err


def test_prepare_into_a_file_is_one_error_line(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    code, err = _prepare(target, capsys)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{target} exists and is not a directory" in err and target.read_text() == "mine"


def test_prepare_refuses_a_large_dataset_of_yours_without_reading_its_rows(tmp_path, capsys, monkeypatch):
    """A user's own train.parquet was read whole (to compare it with the recipe's rows) before the refusal."""
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": ["my data"] * 1000}), data)
    read = []
    monkeypatch.setattr(pq, "read_table", lambda *a, **kw: read.append(a) or pa.table({}))
    code, err = _prepare(tmp_path, capsys)
    assert code == 1 and f"{data} exists and prepare did not write it" in err and read == []


# -- item 7: the learner's inputs --------------------------------------------------------------------
@pytest.fixture
def prepared(tmp_path):
    return runner.prepare(tmp_path / "tiny")


def _config(policy_dir: Path, data: Path):
    return OmegaConf.create({"actor_rollout_ref": {"model": {"path": str(policy_dir)}},
                             "data": {"train_files": str(data), "val_files": str(data), "prompt_key": "prompt"}})


def _issues(policy_dir: Path, data: Path) -> str:
    with pytest.raises(ConfigError) as err:
        runner.check_local_files(_config(policy_dir, data))
    return str(err.value)


def test_the_prepared_files_pass(prepared):
    runner.check_local_files(_config(*prepared))


def test_a_missing_validation_file_is_named_before_verl_reads_it(prepared, tmp_path):
    """Only train_files was checked: a missing val_files failed later, inside verl's dataset loader."""
    cfg = _config(*prepared)
    cfg.data.val_files = [str(prepared[1]), str(tmp_path / "val.parquet")]
    with pytest.raises(ConfigError, match=rf"verl.data.val_files: no file {tmp_path / 'val.parquet'}"):
        runner.check_local_files(cfg)


def test_a_prompt_file_without_prompt_or_reward_model_names_the_file_column_and_layout(prepared, tmp_path):
    data = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"question": ["What is 2 + 2?"], "answer": ["4"], "data_source": ["x"]}), data)
    message = _issues(prepared[0], data)
    assert f"verl.data.train_files: {data} has no 'prompt' column (columns: question, answer, data_source)" in message
    assert f"{data} has no 'reward_model' column" in message and "reward_model = a struct with ground_truth" in message


def test_a_prompt_column_of_plain_strings_is_refused_with_the_conversion(prepared, tmp_path):
    data = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"prompt": ["What is 2 + 2?"], "data_source": ["x"],
                             "reward_model": [{"ground_truth": "4"}]}), data)
    message = _issues(prepared[0], data)
    assert f"{data}: column 'prompt' holds plain strings (row 0: 'What is 2 + 2?')" in message
    assert "[[{'role': 'user', 'content': p}] for p in df['prompt']]" in message


def test_a_file_that_is_not_parquet_is_named(prepared, tmp_path):
    data = tmp_path / "prompts.parquet"
    data.write_text("prompt,answer\nWhat is 2 + 2?,4\n")
    assert f"{data} is not a parquet file" in _issues(prepared[0], data)


@pytest.mark.parametrize("name, content, expected", [
    ("tokenizer.json", b"\x89PNG\r\n\x1a\n\x00\x00", "is not text (byte 0 is not UTF-8); expected a `tokenizers` tokenizer"),
    ("tokenizer.json", b'{"version": "1.0"}', "has no 'model' key; expected a `tokenizers` tokenizer"),
    ("config.json", b"model_type: mistral\n", "is not JSON (Expecting value: line 1 column 1 (char 0)); expected a "
                                              "transformers model config"),
    ("config.json", b"[1, 2]", "holds a JSON list, not an object"),
])
def test_unreadable_policy_files_name_the_file_key_and_layout(prepared, name, content, expected):
    policy_dir, data = prepared
    (policy_dir / name).write_bytes(content)
    message = _issues(policy_dir, data)
    assert f"verl.actor_rollout_ref.model.path: {policy_dir / name} {expected}" in message
    assert "Traceback" not in message


def test_the_policy_directory_is_not_left_with_temporary_files(prepared):
    assert not [p for p in prepared[0].parent.iterdir() if p.name.startswith(".")]
    assert os.listdir(prepared[0])
