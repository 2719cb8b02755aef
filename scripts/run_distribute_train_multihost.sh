#!/bin/sh
# Multi-host training with MultiWorkerMirroredStrategy: one worker per HOSTFILE line
# (host:port, the first is the chief), each started with its TF_CONFIG. POSIX sh: `sh` or
# `bash` runs it.
#
#   On every host:     sh $0 HOSTFILE DATASET_PATH INDEX [nascli train options...]
#                      (INDEX = this host's line, from 0; start them with your cluster's
#                      launcher, pdsh, or by hand)
#   All on this host:  sh $0 HOSTFILE DATASET_PATH all [nascli train options...]
#                      (every line must name this machine: localhost, 127.0.0.1 or hostname)
#
# Each worker reads its own equal, disjoint share of the training shards (make the shard count
# a multiple of the workers: `nascli convert-data --num_workers N`). The run goes to
# ./train_multihost (the chief's log, checkpoints, params.yaml); put it on shared storage for
# resume across hosts. With `all`, worker output goes to ./train_multihost/worker_<INDEX>.out
# (results) and .err (progress, logs); the chief's result is printed at the end.
set -eu
_script_dir="$(dirname -- "$0")"
. "${_script_dir}/_launch_common.sh"

need_args $# 3 "HOSTFILE DATASET_PATH INDEX|all [nascli train options...]"
hostfile="$1"
[ -f "${hostfile}" ] || die "HOSTFILE ${hostfile} does not exist"
dataset_path="$(existing_dir DATASET_PATH "$2")"
which="$3"
shift 3

# hosts: the host:port entries, space-separated (the check below leaves no space or glob
# character in them, so `for h in ${hosts}` splits them back safely).
hosts=""
num_hosts=0
workers_json=""
line_no=0
while IFS= read -r line || [ -n "${line}" ]; do
  line_no=$((line_no + 1))
  line="${line%%#*}"
  line="$(printf '%s' "${line}" | tr -d '[:space:]')"
  [ -n "${line}" ] || continue
  host="${line%:*}"
  port="${line##*:}"
  case "${line}" in *:*) ;; *) host="" ;; esac
  case "${host}" in '' | *[!A-Za-z0-9._-]*) host="" ;; esac
  case "${port}" in '' | *[!0-9]*) port="" ;; esac
  if [ -z "${host}" ] || [ -z "${port}" ] || [ "${#port}" -gt 5 ]; then
    die "HOSTFILE ${hostfile} line ${line_no}: expected host:port, got '${line}'"
  fi
  hosts="${hosts:+${hosts} }${line}"
  workers_json="${workers_json:+${workers_json},}\"${line}\""
  num_hosts=$((num_hosts + 1))
done < "${hostfile}"
[ "${num_hosts}" -ge 1 ] || die "HOSTFILE ${hostfile} names no host:port"

# Checked before anything is written.
if [ "${which}" = all ]; then
  me="$(uname -n)"
  for h in ${hosts}; do
    case "${h%:*}" in
      localhost | 127.0.0.1 | "${me}") ;;
      *) die "'all' starts every worker here, but HOSTFILE names ${h%:*}; run INDEX mode on it" ;;
    esac
  done
elif ! { is_index "${which}" && [ "${which}" -lt "${num_hosts}" ]; }; then
  die "INDEX must be all or a HOSTFILE line index 0..$((num_hosts - 1)), got '${which}'"
fi
find_nascli
mkdir -p train_multihost
model_dir="$(cd train_multihost && pwd)"

start_worker() {  # INDEX [nascli train options...] -> runs one worker in the foreground
  worker_index="$1"
  shift
  worker_tmp="${model_dir}/tmp_worker_${worker_index}"
  mkdir -p "${worker_tmp}"
  worker_task="{\"type\": \"worker\", \"index\": ${worker_index}}"
  TMPDIR="${worker_tmp}" \
  TF_CONFIG="{\"cluster\": {\"worker\": [${workers_json}]}, \"task\": ${worker_task}}" \
    "${nascli_prog}" train --dataset_dir "${dataset_path}" --model_dir "${model_dir}" \
      --strategy multi_worker_mirrored "$@"
}

if [ "${which}" = all ]; then
  pids=""
  i=0
  while [ "${i}" -lt "${num_hosts}" ]; do
    start_worker "${i}" "$@" > "${model_dir}/worker_${i}.out" 2> "${model_dir}/worker_${i}.err" &
    pids="${pids:+${pids} }$!"
    i=$((i + 1))
  done
  echo "started ${num_hosts} workers (output: ${model_dir}/worker_<INDEX>.out and .err)" >&2
  status=0
  i=0
  for pid in ${pids}; do
    if ! wait "${pid}"; then
      last="$(grep -E '^Error: ' "${model_dir}/worker_${i}.err" | tail -n 1 || true)"
      echo "worker ${i} failed: ${last:-see ${model_dir}/worker_${i}.err}" >&2
      status=1
    fi
    i=$((i + 1))
  done
  if [ "${status}" -ne 0 ]; then
    # shellcheck disable=SC2086  # one argument per pid
    kill ${pids} 2> /dev/null || true
    exit 1
  fi
  cat "${model_dir}/worker_0.out"
else
  start_worker "${which}" "$@"
fi
