"""shardcli: a command-line sharding playground for JAX."""

__version__ = "0.1.0"
