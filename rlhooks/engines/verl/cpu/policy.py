"""The tiny policy: a Mistral-architecture causal LM from a ``transformers`` config, random weights,
a short deterministic supervised warm-start, saved as a local Hugging Face model directory that
verl's ``actor_rollout_ref.model.path`` loads like any other.

The warm-start trains on part of each source's items (``WARM_SHARE``), so RL starts from a policy
that writes the answer format and solves some prompts (the ones it saw, and those it generalizes
to) but not others.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import attrs
import numpy as np

from rlhooks.engines.verl.cpu import tasks
from rlhooks.engines.verl.cpu.tasks import PrepareError

RECIPE_FILE = "rlhooks_tiny_policy.json"


@attrs.frozen
class PolicyRecipe:
    """Everything that decides the saved weights (their hash names the directory's contents)."""

    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 128
    #: share of each source's items shown in the warm-start
    warm_share: dict = attrs.field(factory=lambda: {"add_small": 0.6, "add_carry": 0.3, "mul_small": 0.3})
    warm_steps: int = 300
    warm_batch: int = 64
    warm_lr: float = 3e-3
    seed: int = 0

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(attrs.asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def model_config(recipe: PolicyRecipe, tokenizer):
    # Mistral, not Qwen2: transformers' AutoTokenizer (which verl uses) rebuilds a Qwen2 model's
    # tokenizer as byte-level BPE, while for Mistral it loads the saved tokenizer.json as it is
    from transformers import MistralConfig

    return MistralConfig(
        vocab_size=len(tokenizer), hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers, num_attention_heads=recipe.heads, num_key_value_heads=recipe.kv_heads,
        max_position_embeddings=128, sliding_window=None, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
        # flash attention is verl's default and needs a GPU; sdpa is transformers' portable kernel
        attn_implementation="sdpa",
    )


def warm_items(recipe: PolicyRecipe) -> np.ndarray:
    """Row numbers (into ``tasks.items()``) of the items the warm-start shows."""
    data = tasks.items()
    rng = np.random.default_rng(recipe.seed)
    keep = np.zeros(len(data["source"]), dtype=bool)
    for source, share in recipe.warm_share.items():
        rows = np.flatnonzero(data["source"] == source)
        keep[rng.choice(rows, size=int(round(share * len(rows))), replace=False)] = True
    return np.flatnonzero(keep)


def _sequences(tokenizer, rows: np.ndarray):
    """Token ids of prompt + response + eos for the rows, right padded; a mask of the response tokens."""
    import torch

    data = tasks.items()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in data["question"][rows]]
    responses = [tasks.response_text(s, a) for s, a in zip(data["solution"][rows], data["answer"][rows])]
    p_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    r_ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    width = max(len(p) + len(r) for p, r in zip(p_ids, r_ids))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (p, r) in enumerate(zip(p_ids, r_ids)):  # a few hundred short rows, once per build
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        loss_mask[i, len(p): len(p) + len(r)] = True
    return ids, loss_mask


def warm_start(model, tokenizer, recipe: PolicyRecipe) -> list[float]:
    """Supervised training on the warm items (teacher forcing, loss on response tokens); the losses."""
    import torch

    ids, loss_mask = _sequences(tokenizer, warm_items(recipe))
    attention = ids != tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(recipe.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=recipe.warm_lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(recipe.warm_steps):
        batch = torch.randint(len(ids), (recipe.warm_batch,), generator=generator)
        logits = model(input_ids=ids[batch], attention_mask=attention[batch]).logits[:, :-1]
        target = ids[batch][:, 1:]
        mask = loss_mask[batch][:, 1:]
        loss = torch.nn.functional.cross_entropy(logits[mask], target[mask])
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


#: the default recipe's policy, built once by ``build_policy`` and shipped (~300 KB), so tests and
#: examples start in a second instead of the warm-start's 10-100 s on a busy 2-core machine
SHIPPED = Path(__file__).parent / "tiny_policy"


def _holds(directory: Path, recipe: PolicyRecipe) -> bool:
    marker = directory / RECIPE_FILE
    if not marker.is_file() or marker.is_symlink():
        return False
    try:
        return json.loads(marker.read_text()).get("digest") == recipe.digest()
    except (OSError, ValueError, AttributeError):
        return False


def check_target(directory: str | Path) -> None:
    """``directory`` may receive the tiny policy: absent, empty, or one ``build_policy`` wrote (its
    marker, :data:`RECIPE_FILE`, is there); a PrepareError saying what to do otherwise."""
    directory = Path(directory)
    if directory.is_symlink():
        raise PrepareError(f"{directory} is a symbolic link: prepare does not write through links. Remove the "
                           f"link, or prepare into another directory")
    if not directory.exists():
        return
    if not directory.is_dir():
        raise PrepareError(f"{directory} exists and is not a directory: prepare writes the tiny policy there. "
                           f"Prepare into another directory, or move it away")
    marker = directory / RECIPE_FILE
    if marker.is_file() and not marker.is_symlink():
        return
    entries = sorted(p.name for p in directory.iterdir())
    if entries:
        raise PrepareError(
            f"{directory} holds files prepare did not write (no {RECIPE_FILE}: {', '.join(entries[:5])}"
            f"{', ...' if len(entries) > 5 else ''}); prepare never replaces a model it did not build. "
            f"Prepare into another directory, or move {directory} away if it is yours to move"
        )


def _install(built: Path, directory: Path) -> None:
    """Move ``built`` to ``directory``: absent (or empty), in one rename of the whole directory, so a kill
    leaves no policy or a whole one (a half-moved one, without its marker, would be refused as not prepare's);
    else each file by a rename (which replaces a link planted at its name instead of writing through it),
    the marker last: a policy without its marker is never reused."""
    if not directory.exists() or (directory.is_dir() and not any(directory.iterdir())):
        os.chmod(built, 0o755)  # mkdtemp's 0700 -> a model directory as readable as the others
        try:
            os.replace(built, directory)  # rename(2) replaces an empty directory
            return
        except OSError:  # filled meanwhile: file by file below
            pass
    directory.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in built.iterdir() if p.is_file())
    for name in sorted(names, key=lambda n: n == RECIPE_FILE):
        os.replace(built / name, directory / name)


def build_policy(directory: str | Path, recipe: PolicyRecipe | None = None, *, rebuild: bool = False) -> Path:
    """The warm-started tiny policy saved in ``directory`` (model, tokenizer, recipe); reused when the
    directory already holds this recipe's policy; the default recipe's is copied from the shipped one
    unless ``rebuild``. Deterministic for a recipe (one thread) on one machine. Refuses (PrepareError)
    a directory holding files it did not write (see :func:`check_target`)."""
    import shutil
    import tempfile

    recipe = recipe or PolicyRecipe()
    directory = Path(directory)
    check_target(directory)
    if not rebuild and _holds(directory, recipe):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    try:
        if not rebuild and _holds(SHIPPED, recipe):
            for f in SHIPPED.iterdir():
                if f.is_file():
                    shutil.copyfile(f, built / f.name)  # into a fresh directory of ours: no link to follow
        else:
            _build(built, recipe)
        _install(built, directory)
    finally:
        shutil.rmtree(built, ignore_errors=True)
    return directory


def _build(directory: Path, recipe: PolicyRecipe) -> None:
    import torch
    from transformers import MistralForCausalLM

    tokenizer = tasks.make_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # reductions in one fixed order: the same weights on every run of a machine
    try:
        torch.manual_seed(recipe.seed)
        model = MistralForCausalLM(model_config(recipe, tokenizer))
        losses = warm_start(model, tokenizer, recipe)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / RECIPE_FILE).write_text(json.dumps({"digest": recipe.digest(), "recipe": attrs.asdict(recipe),
                                  "parameters": sum(p.numel() for p in model.parameters()),
                                  "warm_items": int(len(warm_items(recipe))),
                                  "warm_loss_first_last": [losses[0], losses[-1]]}, indent=1))


#: what the CPU learner reads from a policy directory: file -> (what it must be, a key it must have)
MODEL_FILES = {
    "config.json": ("a transformers model config: a JSON object with model_type (what save_pretrained writes)",
                    "model_type"),
    "tokenizer.json": ("a `tokenizers` tokenizer: UTF-8 JSON with a model section (what tokenizer.save_pretrained "
                       "writes)", "model"),
    "tokenizer_config.json": ("a transformers tokenizer config: a JSON object", None),
}


def check_model_files(directory: str | Path) -> list[str]:
    """One line per policy file that transformers would fail on with a traceback: not text, not JSON,
    or without its key; each names the file, the key and the expected layout."""
    problems = []
    for name, (expected, key) in MODEL_FILES.items():
        path = Path(directory) / name
        if not path.is_file():
            continue  # config.json's absence is reported by the caller; the tokenizer may be in other files
        try:
            value = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            problems.append(f"{path} is not text (byte {exc.start} is not UTF-8); expected {expected}")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"{path} is not JSON ({' '.join(str(exc).split())}); expected {expected}")
            continue
        if not isinstance(value, dict):
            problems.append(f"{path} holds a JSON {type(value).__name__}, not an object; expected {expected}")
        elif key is not None and key not in value:
            problems.append(f"{path} has no {key!r} key; expected {expected}")
    return problems


def model_file_issues(cfg) -> list:
    """:func:`check_model_files` of a verl config's policy, as config issues at its key."""
    from rlhooks.core.errors import ConfigIssue

    path = Path(str(cfg.actor_rollout_ref.model.path)).expanduser()
    return [ConfigIssue("verl.actor_rollout_ref.model.path", p) for p in check_model_files(path)]
