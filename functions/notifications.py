"""Reading a user's notifications: GET /api/users/{user_id}/notifications, newest first, paged, with a cursor to
follow the feed by."""

import azure.functions as func

from functions.responses import handles_errors, json_response
from shared.api.ids import check_id
from shared.notifications.reading import list_notifications, parse_query
from shared.settings import get_settings
from shared.store.client import get_database

bp = func.Blueprint()


@bp.function_name("get_user_notifications")
@bp.route(route="users/{user_id}/notifications", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@handles_errors
def get_user_notifications(req: func.HttpRequest) -> func.HttpResponse:
    user_id = check_id(req.route_params.get("user_id", ""), "user_id")
    query = parse_query(user_id, req.params)
    page = list_notifications(get_database(), query, settings=get_settings())
    body = {"user_id": user_id, "notifications": page.notifications, "next_page": page.next_page, "cursor": page.cursor}
    return json_response(200, body)
