#!/bin/sh
# Sourced by the run_*.sh launchers, which are POSIX sh (dash or bash runs them): how to find
# nascli, and argument checks. NASCLI (a path to the nascli program) wins; else `nascli` on
# PATH; else this checkout's .venv. A launcher sources it from _script_dir, the folder of $0
# (its own path, as `sh scripts/x.sh` or PATH gave it), so it works from any directory.

# shellcheck disable=SC2154  # _script_dir: set by the launcher.
_repo_dir="$(CDPATH='' cd -- "${_script_dir}/.." && pwd)"

# TensorFlow's C++ log lines (CUDA stub, oneDNN, CPU features) are noise in a launcher's output
# and in each worker's logs; a level the user set wins. (Lines TensorFlow logs through absl, as
# grappler does, ignore it.)
TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
export TF_CPP_MIN_LOG_LEVEL

die() {
  echo "Error: $*" >&2
  exit 1
}

# need_args GIVEN LEAST ARGS: exit 1 with `Usage: sh $0 ARGS` unless GIVEN ($#) >= LEAST.
need_args() {
  if [ "$1" -lt "$2" ]; then
    echo "Usage: sh $0 $3" >&2
    exit 1
  fi
}

# Sets nascli_prog to the nascli program, or exits 1 saying how to get one. Called before any
# redirection, so that the message reaches the terminal.
# shellcheck disable=SC2034  # nascli_prog: read by the launcher.
find_nascli() {
  if [ -n "${NASCLI:-}" ]; then
    nascli_prog="${NASCLI}"
  elif nascli_prog="$(command -v nascli 2> /dev/null)"; then
    :
  elif [ -x "${_repo_dir}/.venv/bin/nascli" ]; then
    nascli_prog="${_repo_dir}/.venv/bin/nascli"
  else
    die "nascli not found: install it (bash scripts/setup.sh) or set NASCLI"
  fi
}

# An absolute path to an existing folder (WHAT PATH), or exit 1 naming it.
existing_dir() {
  [ -d "$2" ] || die "$1 $2 does not exist (or is not a folder)"
  (CDPATH='' cd -- "$2" && pwd)
}

# A positive integer without leading zeros.
is_count() {
  case "$1" in
    '' | 0* | *[!0-9]*) return 1 ;;
  esac
}

# Digits only (a device id, as CUDA_VISIBLE_DEVICES takes it).
is_digits() {
  case "$1" in
    '' | *[!0-9]*) return 1 ;;
  esac
}

# A list index: 0, or a count; at most 9 digits, so that `[ -lt ]` can compare it.
is_index() {
  [ "$1" = 0 ] || { is_count "$1" && [ "${#1}" -le 9 ]; }
}
