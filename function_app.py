"""Azure Functions entry point: create the app and register one blueprint per job."""

import azure.functions as func

from functions.bottles import bp as bottles
from functions.checks import bp as checks
from functions.device_events import bp as device_events
from functions.notifications import bp as notifications
from functions.reports import bp as reports
from functions.start_up import check_start_up
from shared.telemetry.observability import configure_telemetry

check_start_up()  # a bad app setting stops the start-up here, naming the setting, not every invocation later
configure_telemetry()  # Application Insights in Azure; nothing without APPLICATIONINSIGHTS_CONNECTION_STRING
app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (bottles, device_events, reports, checks, notifications):
    app.register_functions(blueprint)
