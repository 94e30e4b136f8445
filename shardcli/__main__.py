"""`python -m shardcli` runs the same entry point as the `shardcli` console script."""

from shardcli.cli import main

if __name__ == "__main__":
    main()
