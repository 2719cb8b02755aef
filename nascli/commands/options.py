"""Option spellings shared by all commands: Model Garden's `--flag_name` and Typer's `--flag-name`."""


def flag(name: str, *short: str) -> list[str]:
  """Both spellings of an option, underscore first (the one Vertex and Model Garden users type)."""
  names = [f"--{name}"]
  if "_" in name:
    names.append(f"--{name.replace('_', '-')}")
  return names + list(short)
