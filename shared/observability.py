"""Operator-facing logs: one structured line per function invocation, with counts and never secrets; and
Application Insights through OpenTelemetry when the app runs in Azure."""

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

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

        # The exporter reads the connection and authentication strings itself. The distro's own trace-based log
        # sampling drops every record of an unsampled trace, warnings and errors included; so it stays off and
        # the handler it adds sends records below WARNING only with a sampled trace (volume stays bounded at
        # ~17 K requests/s), and every WARNING and ERROR whatever the sampling.
        root = logging.getLogger()
        before = list(root.handlers)
        configure_azure_monitor(enable_trace_based_sampling_for_logs=False)
        for handler in root.handlers:
            if handler not in before:
                handler.addFilter(warnings_or_sampled)
    except Exception as error:  # telemetry must never take the app down
        # The type only: a parser's message could echo the connection string.
        log.warning("Application Insights telemetry is off: %s", type(error).__name__)
        return False
    _telemetry_configured = True
    return True


def warnings_or_sampled(record: logging.LogRecord) -> bool:
    """Keep a WARNING or worse always; a lesser record unless it belongs to a trace the sampler dropped."""
    if record.levelno >= logging.WARNING:
        return True
    context = trace.get_current_span().get_span_context()
    return not context.is_valid or context.trace_flags.sampled


def log_invocation(logger: logging.Logger, function: str, **fields: Any) -> None:
    """Log `function=<name> {json of fields}` at INFO. Pass counts, ids and durations only: never device
    keys, connection strings or request bodies."""
    logger.info("invocation %s %s", function, json.dumps(fields, default=str, separators=(",", ":")))
