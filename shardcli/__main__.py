"""`python -m shardcli` runs the same app as the `shardcli` console script."""

from shardcli.cli import app

if __name__ == "__main__":
    app(prog_name="shardcli")
