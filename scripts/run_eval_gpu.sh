#!/bin/sh
# Evaluates CHECKPOINT_PATH (a checkpoint prefix such as train_parallel/ckpt-500, or a model
# dir for its latest checkpoint) on DATASET_PATH's validation split, into ./eval/log, which ends
# with THOR's line: result: {...} ckpt=...  The line is printed on stdout too.
# POSIX sh: `sh` or `bash` runs it.
set -eu
_script_dir="$(dirname -- "$0")"
. "${_script_dir}/_launch_common.sh"

need_args $# 2 "DATASET_PATH CHECKPOINT_PATH [nascli eval options...]"
dataset_path="$(existing_dir DATASET_PATH "$1")"
checkpoint="$2"
shift 2
if [ -d "${checkpoint}" ]; then
  model_dir="${checkpoint}"
elif [ -f "${checkpoint}.index" ]; then
  model_dir="$(dirname -- "${checkpoint}")"
  set -- --checkpoint_path "${checkpoint}" "$@"
else
  die "CHECKPOINT_PATH ${checkpoint} does not exist (no ${checkpoint}.index, not a folder)"
fi
find_nascli
mkdir -p eval
# `if` keeps nascli's exit status under set -e.
if "${nascli_prog}" eval --model_dir "${model_dir}" --dataset_dir "${dataset_path}" \
    --output eval/eval_metrics.json "$@" > eval/log 2> eval/stderr.log; then
  code=0
else
  code=$?
fi
if [ "${code}" -ne 0 ]; then
  tail -n 1 eval/stderr.log >&2
  exit "${code}"
fi
tail -n 1 eval/log
