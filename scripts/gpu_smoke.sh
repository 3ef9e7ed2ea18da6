#!/usr/bin/env bash
# A tiny real GRPO job with the rlhooks verl shim: Qwen2.5-0.5B-Instruct, GSM8K, vLLM rollout,
# one GPU, 3 steps, DAPO filtering, a checkpoint at step 2 and a resume to step 3.
#
#   MODEL=/path/to/Qwen2.5-0.5B-Instruct DATA=/path/to/gsm8k scripts/gpu_smoke.sh
#
# DATA must hold train.parquet / test.parquet in verl's format (verl's examples/data_preprocess/gsm8k.py).
# Needs: a CUDA GPU, pip install -e '.[verl]' plus vllm. Passes when both runs exit 0 and the
# log shows the rlhooks metrics (train/num_gen_batches, filter/kept_groups) in verl's console lines.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA=${DATA:-$HOME/data/gsm8k}
OUT=${OUT:-$(mktemp -d /tmp/rlhooks-gpu-smoke.XXXX)}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python}

common=(
  --config "$HERE/gpu_smoke.yaml"
  "data.train_files=$DATA/train.parquet" "data.val_files=$DATA/test.parquet"
  "actor_rollout_ref.model.path=$MODEL"
  "trainer.default_local_dir=$OUT/ckpt" "rlhooks.run.out_dir=$OUT/runs"
)
# 1) steps 1-2, checkpoint at step 2
$PY -m rlhooks.engines.verl.main "${common[@]}" trainer.total_training_steps=2 2>&1 | tee "$OUT/run1.log"
# 2) resume from global_step_2 and run step 3 (sampler + rlhooks state restored from rlhooks.pt / data.pt)
$PY -m rlhooks.engines.verl.main "${common[@]}" trainer.total_training_steps=3 trainer.resume_mode=auto 2>&1 | tee "$OUT/run2.log"

# verl's console logger prints "step:N - key:value - ..." (Ray prefixes the actor name)
grep -qE "step:[0-9]+ - .*train/num_gen_batches:" "$OUT/run1.log"
grep -qE "step:3 - .*filter/kept_groups:" "$OUT/run2.log"
grep -q "restored rlhooks state" "$OUT/run2.log"
test -f "$OUT/ckpt/global_step_2/rlhooks.pt"
echo "gpu smoke OK: logs and checkpoints in $OUT"
