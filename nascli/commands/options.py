"""Option spellings shared by all commands.

Help shows one name per option, `--flag_name` (Vertex AI NAS and Model Garden spell it so); the
dashed `--flag-name` is accepted too, because the root command's `token_normalize_func`
(`normalize_token`) maps every option token to underscores before Click looks it up. Click
applies it to option names only (the part before `=`), never to values, and not after `--`.
"""


def flag(name: str, *short: str) -> list[str]:
  """The declared names of an option: `--name` (underscores) and any short names."""
  return [f"--{name}", *short]


def normalize_token(name: str) -> str:
  """An option's name without its prefix (`flag-name`) as it is registered (`flag_name`)."""
  return name.replace("-", "_")


def normalize_option(opt: str) -> str:
  """`--flag-name` -> `--flag_name`; short options (`-h`) are left as they are."""
  return "--" + normalize_token(opt[2:]) if opt.startswith("--") else opt
