#!/bin/sh
# Trains on DEVICE_NUM GPUs of this host into ./train_parallel: THOR-style step lines in
# ./train_parallel/log, checkpoints beside them. Re-running resumes; delete the folder to start
# over. Extra arguments go to `nascli train`. POSIX sh: `sh` or `bash` runs it.
#
# One process with MirroredStrategy over the GPUs, not one process per GPU with multi-worker:
# on one host they do the same all-reduce (NCCL), but one process builds the graph once, has
# no gRPC collective setup or cross-process barriers, and one failure stops one process.
# On a machine without GPUs the same path runs over DEVICE_NUM logical CPU devices.
set -eu
_script_dir="$(dirname -- "$0")"
. "${_script_dir}/_launch_common.sh"

need_args $# 2 "DATASET_PATH DEVICE_NUM [nascli train options...]"
dataset_path="$(existing_dir DATASET_PATH "$1")"
is_count "$2" || die "DEVICE_NUM must be a positive integer, got '$2'"
device_num="$2"
shift 2
find_nascli
mkdir -p train_parallel
echo "training with ${device_num} replicas into ./train_parallel (log: ./train_parallel/log)" >&2
"${nascli_prog}" train --dataset_dir "${dataset_path}" --model_dir train_parallel \
  --strategy mirrored --num_gpus "${device_num}" "$@"
