#!/bin/sh
# Trains on one GPU (DEVICE_ID, default 0; the CPU where there is none) into ./train: THOR-style
# step lines in ./train/log, checkpoints beside them. Re-running resumes; delete ./train to
# start over. Extra arguments go to `nascli train` (e.g. --config_file, --params_override).
# POSIX sh: `sh` or `bash` runs it.
set -eu
_script_dir="$(dirname -- "$0")"
. "${_script_dir}/_launch_common.sh"

need_args $# 1 "DATASET_PATH [DEVICE_ID] [nascli train options...]"
dataset_path="$(existing_dir DATASET_PATH "$1")"
shift
device_id=0
if [ $# -ge 1 ] && is_digits "$1"; then
  device_id="$1"
  shift
fi
find_nascli
CUDA_VISIBLE_DEVICES="${device_id}"
export CUDA_VISIBLE_DEVICES
mkdir -p train
echo "training on device ${device_id} into ./train (log: ./train/log)" >&2
"${nascli_prog}" train --dataset_dir "${dataset_path}" --model_dir train --strategy one_device "$@"
