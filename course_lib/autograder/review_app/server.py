"""The review app served by werkzeug in a thread, on 127.0.0.1 (the command line and the tests)."""

from __future__ import annotations

import errno
import logging
import threading
from dataclasses import dataclass, field

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

__all__ = ["ReviewServer", "serve"]


@dataclass
class ReviewServer:
    """A running review server.

    Args:
        server: werkzeug's threaded server.
        thread: the thread that serves it.
        token: the access token.
    """

    server: BaseWSGIServer
    thread: threading.Thread
    token: str = field(repr=False)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        """The address to open, with the token (it leaves the address bar on the first request)."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def shutdown(self) -> None:
        """Stop serving and wait for the thread to end."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def serve(app: Flask, *, host: str = "127.0.0.1", port: int = 0) -> ReviewServer:
    """Serve ``app`` in a thread (one thread per request) until :meth:`ReviewServer.shutdown`.

    Args:
        app: the app of :func:`.create_app`.
        host: the address to bind (127.0.0.1: only this machine can connect).
        port: the port (0: any free one).

    Returns:
        The running server (its ``url`` carries the token).

    Raises:
        ValueError: a host other than 127.0.0.1 or localhost.
        OSError: the port is taken (werkzeug's own exit turned into one).
    """
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"host: expected 127.0.0.1 or localhost (the app is local only), got {host!r}")
    # werkzeug logs every request line, the first one's token included: only warnings and errors
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    try:
        server = make_server(host, port, app, threaded=True)
    except SystemExit:  # werkzeug exits when the port is taken (after saying so on stderr)
        raise OSError(errno.EADDRINUSE, "Address already in use") from None
    app.config["REVIEW_PORT"] = server.server_port
    thread = threading.Thread(target=server.serve_forever, name="course-lib-review", daemon=True)
    thread.start()
    return ReviewServer(server, thread, app.config["REVIEW_TOKEN"])
