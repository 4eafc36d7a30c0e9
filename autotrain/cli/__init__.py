"""The `autotrain` command line. Modules here import only typer, rich and autotrain.config at start-up."""
