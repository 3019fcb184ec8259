"""The app on http://127.0.0.1:7071/api/... with its timers running, on the default store (SecantusDB
in-process) or any MongoDB: the same routes as under `func start`, without Core Tools.

    ./dev serve [--port 7071] [--mongodb-uri URI] [--data-dir DIR] [--no-timers]

Function keys are not enforced, as under `func start`. Queue messages the timers send are logged.
"""

import argparse
import logging
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tools.arguments import int_between
from tools.local_host import LocalHost

log = logging.getLogger("serve")


def _handler_for(host: LocalHost) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not url.path.startswith("/api/"):
                response_status, headers, payload = 404, {}, b""
            else:
                response = host.handle(
                    self.command,
                    url.path,
                    headers=dict(self.headers.items()),
                    params=dict(parse_qsl(url.query)),
                    body=body,
                )
                response_status, payload = response.status_code, response.get_body()
                headers = dict(response.headers)
                if response.mimetype:
                    headers.setdefault("Content-Type", response.mimetype)
            self.send_response(response_status)
            for name, value in headers.items():
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _dispatch  # noqa: N815 - http.server's naming

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return Handler


class LocalServer:
    """The HTTP adapter and the timer loop; start() returns at once, stop() ends both."""

    def __init__(self, host: LocalHost, address: tuple[str, int], *, timers: bool = True) -> None:
        self.host = host
        self.http = ThreadingHTTPServer(address, _handler_for(host))
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.http.serve_forever, daemon=True)]
        if timers and host.timers:
            self._threads.append(threading.Thread(target=self._run_timers, daemon=True))

    @property
    def base_url(self) -> str:
        address, port = self.http.server_address[:2]
        return f"http://{address!s}:{port}"

    def start(self) -> "LocalServer":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.http.shutdown()
        self.http.server_close()

    def _run_timers(self) -> None:
        last = datetime.now(UTC)
        while not self._stop.is_set():
            firings = self.host.due_timers(last, datetime.now(UTC))
            for _, name in firings:
                try:
                    sent = self.host.run_timer(name)
                except Exception:
                    log.exception("timer %s failed", name)
                    continue
                for message in sent:
                    log.info("queue message from %s: %s", name, message)
            if firings:
                last = firings[-1][0]
            self._stop.wait(0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument(
        "--port", type=int_between(0, 65535), default=7071, help="port to listen on, 0 for any free one (default 7071)"
    )
    parser.add_argument("--mongodb-uri", help="any MongoDB (default: SecantusDB in-process)")
    parser.add_argument("--data-dir", help="persist the in-process store here (default: in memory)")
    parser.add_argument("--no-timers", action="store_true", help="do not run the timer functions")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import function_app
    from tools.local_store import local_store

    with local_store(args.mongodb_uri, data_dir=args.data_dir):
        server = LocalServer(LocalHost.from_app(function_app.app), (args.host, args.port), timers=not args.no_timers)
        server.start()
        log.info("serving %s/api/ (timers: %s); Ctrl-C stops", server.base_url, ", ".join(server.host.timers) or "none")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()


if __name__ == "__main__":
    main()
