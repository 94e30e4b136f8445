"""The JSON documents shardcli writes, and comparing two of them.

- `schema`: the schema version and the keys of every record in every document;
- `compare`: `shardcli compare`: line up two results of one command and find the regressions.

Imports from: specs, errors.
"""
