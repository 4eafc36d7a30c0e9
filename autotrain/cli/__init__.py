"""The `autotrain` command line. Modules here import only typer, rich and autotrain.config at start-up."""

# First of all, so that its exit handler runs after every other one (cli/ending.py says why).
from autotrain.cli import ending  # noqa: F401
