"""Operator-facing logs: one structured line per function invocation, with counts and never secrets; and
Application Insights through OpenTelemetry when the app runs in Azure."""

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

CONNECTION_STRING_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"

log = logging.getLogger(__name__)
_telemetry_configured = False


def configure_telemetry(environ: Mapping[str, str] = os.environ) -> bool:
    """Export logs, traces and metrics to Application Insights (the azure-monitor-opentelemetry distro) when
    APPLICATIONINSIGHTS_CONNECTION_STRING is set; otherwise do nothing, silently (local runs, tests). True once
    configured; calling again does nothing. A telemetry fault is logged and never stops the app."""
    global _telemetry_configured  # noqa: PLW0603 - one exporter pipeline per process
    if _telemetry_configured:
        return True
    if not environ.get(CONNECTION_STRING_SETTING, "").strip():
        return False
    try:
        # Imported here: the distro is heavy and only ever needed in Azure.
        from azure.monitor.opentelemetry import configure_azure_monitor  # noqa: PLC0415

        # Logs follow their trace's sampling decision (OTEL_TRACES_SAMPLER/_ARG), so telemetry volume stays
        # bounded at ~17 K requests/s; the exporter reads the connection and authentication strings itself.
        configure_azure_monitor(enable_trace_based_sampling_for_logs=True)
    except Exception as error:  # telemetry must never take the app down
        # The type only: a parser's message could echo the connection string.
        log.warning("Application Insights telemetry is off: %s", type(error).__name__)
        return False
    _telemetry_configured = True
    return True


def log_invocation(logger: logging.Logger, function: str, **fields: Any) -> None:
    """Log `function=<name> {json of fields}` at INFO. Pass counts, ids and durations only: never device
    keys, connection strings or request bodies."""
    logger.info("invocation %s %s", function, json.dumps(fields, default=str, separators=(",", ":")))
