#!/usr/bin/env bash
# GPU variant of the outcome experiment (bench/outcome.py): the same four arms (base, action-only
# SFT, distilled thinks without skills, distilled thinks with the skill bank) with a larger base
# model, a harder game and budgets sized for one GPU. Not run in CI; prints the same four-arm table
# and `outcome:` lines, and writes ROOT/outcome.json.
#
#   MODEL_DIR=/models/Qwen2.5-1.5B-Instruct bash bench/outcome_gpu.sh
#   MODEL_DIR=... LLM_URL=http://127.0.0.1:8000/v1 LLM_MODEL=Qwen2.5-7B-Instruct bash bench/outcome_gpu.sh
#
# Env:
#   MODEL_DIR   local Hugging Face folder of the policy to fine-tune (required; the run is offline).
#               Any chat model with a chat template; 0.5B-3B fits one 24-80 GB GPU with LoRA.
#   LLM_URL, LLM_MODEL  OpenAI-compatible endpoint for the data pipeline's memory/distill stages
#               (e.g. vLLM serving a 7B+ instruct model); default: the embedded teacher (llama.cpp on CPU).
#   GAME, GAME_PARAMS   default twc with 2 rooms and 2 items (gold plans of ~8 actions): harder than
#               the CPU run's one-room coin game, where the 135M model is the bottleneck.
#   TRAIN_TASKS (300), NOISE (0.1), SFT_STEPS (600), BATCH (8), LR (2e-4), LORA_R (32),
#   EVAL (200 games per policy: a 95 % Wilson half-width of at most 0.07), MAX_STEPS (20),
#   TOKENS (256 new tokens per action), GRPO (set to 1 for --grpo with GRPO_STEPS=20), ROOT,
#   ARMS (default all four: base,actions,thinks,skills), JOBS (arms trained at once; 1: one GPU,
#   one arm at a time), HISTORY (2 observation/action pairs in every prompt: SkillRL's default; the
#   CPU run shows 1 to save prefill time), DISTILL_STEPS (8 actions per distill call).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
: "${MODEL_DIR:?set MODEL_DIR to a local Hugging Face model folder}"
$PY -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "no CUDA device visible; use bench/outcome.py for the CPU run" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
GAME=${GAME:-twc}
GAME_PARAMS=${GAME_PARAMS:-numLocations=2,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0}
args=(--root "${ROOT:-runs/outcome_gpu}" --run-id outcome-gpu --base-model "$MODEL_DIR"
      --game "$GAME" --game-params "$GAME_PARAMS" --train-tasks "${TRAIN_TASKS:-300}" --noise "${NOISE:-0.1}"
      --rollout-max-steps 30 --sft-steps "${SFT_STEPS:-600}" --sft-batch "${BATCH:-8}" --sft-lr "${LR:-2e-4}"
      --lora-r "${LORA_R:-32}" --eval-episodes "${EVAL:-200}" --eval-max-steps "${MAX_STEPS:-20}"
      --max-new-tokens "${TOKENS:-256}" --eval-batch 32 --jobs "${JOBS:-1}"
      --history-length "${HISTORY:-2}" --distill-steps-per-call "${DISTILL_STEPS:-8}" --arms "${ARMS:-base,actions,thinks,skills}")
[ -n "${LLM_URL:-}" ] && args+=(--llm-base-url "$LLM_URL" --llm-model "${LLM_MODEL:?set LLM_MODEL with LLM_URL}")
[ "${GRPO:-0}" = 1 ] && args+=(--grpo --grpo-steps "${GRPO_STEPS:-20}")
exec $PY bench/outcome.py "${args[@]}"
