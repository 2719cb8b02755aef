# Sourced by the run_*.sh launchers: how to call nascli, and argument checks.
# NASCLI (a path to the nascli program) wins; else `nascli` on PATH; else this checkout's .venv.

_repo_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"

nascli_cmd() {
  if [[ -n "${NASCLI:-}" ]]; then
    "${NASCLI}" "$@"
  elif command -v nascli > /dev/null 2>&1; then
    nascli "$@"
  elif [[ -x "${_repo_dir}/.venv/bin/nascli" ]]; then
    "${_repo_dir}/.venv/bin/nascli" "$@"
  else
    echo "Error: nascli not found: install it (bash scripts/setup.sh) or set NASCLI" >&2
    exit 1
  fi
}

die() {
  echo "Error: $*" >&2
  exit 1
}

# An absolute path to an existing folder, or exit 1 naming it.
existing_dir() {
  local what="$1" path="$2"
  [[ -d "${path}" ]] || die "${what} ${path} does not exist (or is not a folder)"
  (cd -- "${path}" && pwd)
}

is_count() {
  [[ "$1" =~ ^[1-9][0-9]*$ ]]
}
