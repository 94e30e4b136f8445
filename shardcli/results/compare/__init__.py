"""`shardcli compare`: two results of one command lined up, and the regressions found.

- `run`: the request, the rows and the verdict; `kinds`: each command's rows and what makes two
  results comparable; `metrics`: the figures compared; `reading`: a document's fields, checked.

Imports from: specs, errors.
"""
