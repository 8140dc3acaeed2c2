"""A webhook receiver for the tests: a real HTTP server on loopback recording each POST
(path, headers, JSON body); stopped and started again on the same port to play a
receiver that is down."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, port: int, status: int = 200, location: str = "") -> None:
        self.port = port
        self.status, self.location = status, location     # its answer to every POST
        self.received: list[dict] = []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> "Receiver":
        received = self.received
        status, location = self.status, self.location

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "headers": dict(self.headers),
                                 "raw": body, "body": json.loads(body)})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.allow_reuse_address = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def bodies(self, path: str = "/hook") -> list[dict]:
        return [entry["body"] for entry in self.received if entry["path"] == path]
