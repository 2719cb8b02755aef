#!/usr/bin/env bash
# Evaluates CHECKPOINT_PATH (a checkpoint prefix such as train_parallel/ckpt-500, or a model
# dir for its latest checkpoint) on DATASET_PATH's validation split, into ./eval/log, which ends
# with THOR's line: result: {...} ckpt=...  The line is printed on stdout too.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/_launch_common.sh"

usage="Usage: bash $0 DATASET_PATH CHECKPOINT_PATH [nascli eval options...]"
if [[ $# -lt 2 ]]; then
  echo "${usage}" >&2
  exit 1
fi
dataset_path="$(existing_dir DATASET_PATH "$1")"
checkpoint="$2"
shift 2
if [[ -d "${checkpoint}" ]]; then
  model_dir="${checkpoint}"
  ckpt_args=()
elif [[ -f "${checkpoint}.index" ]]; then
  model_dir="$(dirname -- "${checkpoint}")"
  ckpt_args=(--checkpoint_path "${checkpoint}")
else
  die "CHECKPOINT_PATH ${checkpoint} does not exist (no ${checkpoint}.index, not a folder)"
fi
mkdir -p eval
set +e
nascli_cmd eval --model_dir "${model_dir}" "${ckpt_args[@]}" --dataset_dir "${dataset_path}" \
  --output eval/eval_metrics.json "$@" > eval/log 2> eval/stderr.log
code=$?
set -e
if [[ ${code} -ne 0 ]]; then
  tail -n 1 eval/stderr.log >&2
  exit "${code}"
fi
tail -n 1 eval/log
