"""The JSON documents shardcli writes, and comparing two of them.

- `documents`: the schema version and every kind of document, its envelope and body;
- `shapes`: the shapes of JSON values (`Record`, `ListOf`, `MapOf`, `Maybe`, `Tagged`) and their check;
- `records`: the envelope and the records several documents share (runtime, mesh, timing, a program);
- `bodies`: each command's own records, the body of its document;
- `compare/`: `shardcli compare`: line up two results of one command and find the regressions.

Imports from: specs, errors.
"""
