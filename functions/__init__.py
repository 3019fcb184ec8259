"""Azure Functions blueprints, one per job. Triggers parse, call `shared`, and shape the response."""
