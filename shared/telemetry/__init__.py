"""What operators see: the invocation logs and the OpenTelemetry metrics they alert on."""
