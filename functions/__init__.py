"""Azure Functions blueprints, one per job. Triggers parse, call `shared`, and shape the response; the queue and
timer triggers read their work message and log their invocation through `invocations`."""
