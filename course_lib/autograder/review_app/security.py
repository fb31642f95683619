"""The review app's guards: who may call it (the token), from where (the Host header), how
(the CSRF token on every POST), and what the browser may do with its pages (the headers).

The token is the only credential: the URL the command prints carries it once
(``?token=...``); the first request with it sets an HttpOnly, SameSite=Strict cookie and is
redirected to the same URL without the token, so it leaves the address bar, the history and
any Referer. Every route, the static files included, answers 403 without a valid cookie or
token. The Host header must name this server (127.0.0.1 or localhost, with its port): a page
of another site that rebinds its DNS name to 127.0.0.1 is refused. The CSRF token is derived
from the token (an HMAC), so it is known to the app's own pages and to nobody without the token.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

from flask import Flask, abort, current_app, g, redirect, request
from markupsafe import Markup, escape
from werkzeug.wrappers import Response

__all__ = ["CSP", "install_guards", "csrf_token", "csrf_field", "cookie_name"]

#: The Content-Security-Policy of every response: the app's own script and style only; the
#: script's ``fetch`` of a grade may reach this server alone (``connect-src 'self'``).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HOSTS = ("127.0.0.1", "localhost")


def cookie_name(token: str) -> str:
    """The token cookie's name, unique per token: cookies do not tell ports apart, so two review
    servers on one machine (two courses, two gradebooks) must not overwrite each other's."""
    return "review-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def csrf_token() -> str:
    """The CSRF token of this app's forms (an HMAC of the access token)."""
    token = current_app.config["REVIEW_TOKEN"].encode()
    return hmac.new(token, b"csrf", hashlib.sha256).hexdigest()


def csrf_field() -> Markup:
    """The hidden ``csrf`` input every POST form of the app carries (for the templates; made once
    per request, as a page of 1,000 answers has as many forms)."""
    if "csrf_field" not in g:
        g.csrf_field = Markup('<input type="hidden" name="csrf" value="{}">').format(escape(csrf_token()))
    return Markup(g.csrf_field)


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _host_allowed() -> bool:
    """Whether the Host header names this server: 127.0.0.1 or localhost, with the server's port
    (any port when the app is not served, as under Flask's test client)."""
    host = request.headers.get("Host", "")
    name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
    served = current_app.config.get("REVIEW_PORT")
    if served is not None:
        return name in _HOSTS and port == str(served)
    return name in _HOSTS and (port == "" or port.isdigit())


def _check_request() -> Response | None:
    """The guard run before every request (see the module's docstring)."""
    if not _host_allowed():
        abort(400, "this server answers only to 127.0.0.1 or localhost (with its port)")
    token = current_app.config["REVIEW_TOKEN"]
    given = request.args.get("token")
    if given is not None:
        if not _same(given, token):
            abort(403)
        rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
        target = request.path + ("?" + urlencode(rest) if rest else "")
        response = redirect(target, code=303)
        response.set_cookie(cookie_name(token), token, httponly=True, samesite="Strict", path="/")
        return response
    if not _same(request.cookies.get(cookie_name(token)), token):
        abort(403)
    if request.method == "POST":
        sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf")
        if not _same(sent, csrf_token()):
            abort(403)
    return None


def _add_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    return response


def _set_grader() -> None:
    """``g.grader``: this browser's name (its ``grader`` cookie), else the app's default."""
    name = request.cookies.get("grader", "").strip()
    g.grader = name[:80] if name else current_app.config["REVIEW_GRADER"]


def install_guards(app: Flask) -> None:
    """Run the guards before every request of ``app`` and add the headers to every response."""
    app.before_request(_check_request)
    app.before_request(_set_grader)
    app.after_request(_add_headers)
    app.jinja_env.globals["csrf_field"] = csrf_field
    app.jinja_env.globals["csrf_token"] = csrf_token
