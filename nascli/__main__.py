"""`python -m nascli` is the console script."""

from nascli.app import run

if __name__ == "__main__":
  run()
