"""`python -m shardcli` runs the same app as the `shardcli` console script."""

from shardcli.cli import main

if __name__ == "__main__":
    main()
