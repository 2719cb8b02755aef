"""What every bench records about the machine it ran on, and how busy the machine was."""

import os
import platform
import time
from importlib import metadata
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PACKAGES = ("tensorflow", "tf-models-official", "tf-keras", "numpy")


def _first_field(path: str, prefix: str) -> str | None:
  try:
    for line in Path(path).read_text().splitlines():
      if line.startswith(prefix):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return None


def machine(packages: tuple[str, ...] = PACKAGES) -> dict:
  """CPU model, cores (and this process's share), memory, Python and package versions, load."""
  mem_kib = _first_field("/proc/meminfo", "MemTotal:")
  versions = {}
  for dist in packages:
    try:
      versions[dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
      versions[dist] = None
  return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
          "cpu_model": _first_field("/proc/cpuinfo", "model name") or "unknown",
          "mem_gib": round(int(mem_kib.split()[0]) / 1024 / 1024, 1) if mem_kib else None,
          "platform": platform.platform(), "python": platform.python_version(), **versions,
          "loadavg_at_start": os.getloadavg()}


def machine_busy() -> float:
  """CPU seconds the whole machine has been busy (all but idle and iowait)."""
  with open("/proc/stat", encoding="ascii") as f:
    fields = [int(v) for v in f.readline().split()[1:]]
  return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def foreign_load(seconds: float) -> float:
  """CPUs used by processes other than this one and its reaped children, over `seconds`."""
  busy0, own0 = machine_busy(), sum(os.times()[:4])
  time.sleep(seconds)
  return max(0.0, ((machine_busy() - busy0) - (sum(os.times()[:4]) - own0)) / seconds)
