"""Reading a JSON file someone else may have written: every way it can be damaged is bad input.

A truncated file, a binary one, one nested a hundred thousand levels deep, a number with ten
thousand digits, a directory where a file should be: each becomes one line naming the file and what
is wrong with it (exit 2), never a traceback or an internal error.
"""

from __future__ import annotations

import json
from typing import Any

from shardcli.errors import ShardcliError


def read_json(path: str) -> Any:
    """The document in `path` (UTF-8 JSON; NaN and Infinity read as Python reads them: the caller
    judges each value it takes).

    Raises:
        ShardcliError: the file cannot be read or does not hold such a document.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ShardcliError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise ShardcliError(f"cannot read {path}: it is a directory") from None
    except UnicodeDecodeError:
        raise ShardcliError(f"{path} is not JSON: it is not UTF-8 text") from None
    except OSError as e:
        raise ShardcliError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardcliError(f"{path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ShardcliError(f"{path} is not usable JSON: it is nested too deeply") from None
    except ValueError as e:  # an integer of more than 4300 digits
        reason = str(e).split(";")[0].split("\n")[0]
        raise ShardcliError(f"{path} is not usable JSON: {reason}") from None
