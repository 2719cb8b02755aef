#!/usr/bin/env bash
# Multi-host training with MultiWorkerMirroredStrategy: one worker per HOSTFILE line
# (host:port, the first is the chief), each started with its TF_CONFIG.
#
#   On every host:     bash $0 HOSTFILE DATASET_PATH INDEX [nascli train options...]
#                      (INDEX = this host's line, from 0; start them with your cluster's
#                      launcher, pdsh, or by hand)
#   All on this host:  bash $0 HOSTFILE DATASET_PATH all [nascli train options...]
#                      (every line must name this machine: localhost, 127.0.0.1 or hostname)
#
# Each worker reads its own equal, disjoint share of the training shards (make the shard count
# a multiple of the workers: `nascli convert-data --num_workers N`). The run goes to
# ./train_multihost (the chief's log, checkpoints, params.yaml); put it on shared storage for
# resume across hosts. With `all`, worker output goes to ./train_multihost/worker_<INDEX>.out
# (results) and .err (progress, logs); the chief's result is printed at the end.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/_launch_common.sh"

usage="Usage: bash $0 HOSTFILE DATASET_PATH INDEX|all [nascli train options...]"
if [[ $# -lt 3 ]]; then
  echo "${usage}" >&2
  exit 1
fi
hostfile="$1"
[[ -f "${hostfile}" ]] || die "HOSTFILE ${hostfile} does not exist"
dataset_path="$(existing_dir DATASET_PATH "$2")"
which="$3"
shift 3

hosts=()
line_no=0
while IFS= read -r line || [[ -n "${line}" ]]; do
  line_no=$((line_no + 1))
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [[ -z "${line}" ]] && continue
  [[ "${line}" =~ ^[A-Za-z0-9._-]+:[0-9]{1,5}$ ]] \
    || die "HOSTFILE ${hostfile} line ${line_no}: expected host:port, got '${line}'"
  hosts+=("${line}")
done < "${hostfile}"
[[ ${#hosts[@]} -ge 1 ]] || die "HOSTFILE ${hostfile} names no host:port"

workers_json=""
for h in "${hosts[@]}"; do
  workers_json+="${workers_json:+,}\"${h}\""
done

mkdir -p train_multihost
model_dir="$(cd train_multihost && pwd)"

start_worker() {  # index -> runs one worker in the foreground
  local index="$1"
  shift
  local tmp="${model_dir}/tmp_worker_${index}"
  mkdir -p "${tmp}"
  TMPDIR="${tmp}" \
  TF_CONFIG="{\"cluster\": {\"worker\": [${workers_json}]}, \"task\": {\"type\": \"worker\", \"index\": ${index}}}" \
    nascli_cmd train --dataset_dir "${dataset_path}" --model_dir "${model_dir}" \
      --strategy multi_worker_mirrored "$@"
}

if [[ "${which}" == "all" ]]; then
  me="$(hostname)"
  for h in "${hosts[@]}"; do
    case "${h%%:*}" in
      localhost|127.0.0.1|"${me}") ;;
      *) die "'all' starts every worker here, but HOSTFILE names ${h%%:*}; run INDEX mode on it" ;;
    esac
  done
  pids=()
  for i in "${!hosts[@]}"; do
    start_worker "${i}" "$@" > "${model_dir}/worker_${i}.out" 2> "${model_dir}/worker_${i}.err" &
    pids+=("$!")
  done
  echo "started ${#pids[@]} workers (output: ${model_dir}/worker_<INDEX>.out and .err)" >&2
  status=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      last="$(grep -E '^Error: ' "${model_dir}/worker_${i}.err" | tail -n 1 || true)"
      echo "worker ${i} failed: ${last:-see ${model_dir}/worker_${i}.err}" >&2
      status=1
    fi
  done
  if [[ ${status} -ne 0 ]]; then
    kill "${pids[@]}" 2> /dev/null || true
    exit 1
  fi
  cat "${model_dir}/worker_0.out"
elif [[ "${which}" =~ ^[0-9]+$ ]] && (( which < ${#hosts[@]} )); then
  start_worker "${which}" "$@"
else
  die "INDEX must be all or a HOSTFILE line index 0..$(( ${#hosts[@]} - 1 )), got '${which}'"
fi
