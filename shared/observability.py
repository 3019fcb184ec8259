"""Operator-facing logs: one structured line per function invocation, with counts and never secrets."""

import json
import logging
from typing import Any


def log_invocation(logger: logging.Logger, function: str, **fields: Any) -> None:
    """Log `function=<name> {json of fields}` at INFO. Pass counts, ids and durations only: never device
    keys, connection strings or request bodies."""
    logger.info("invocation %s %s", function, json.dumps(fields, default=str, separators=(",", ":")))
