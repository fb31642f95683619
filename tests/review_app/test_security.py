"""The review app's guards, through Flask's test client: the token, the Host header, CSRF, headers."""

from __future__ import annotations

import pytest
from review_fixtures import TOKEN, A, Q, class_gradebook, login, make_app

from course_lib.autograder.review_app.security import CSP, cookie_name, csrf_token


@pytest.fixture
def app(tmp_path):
    return make_app(class_gradebook(tmp_path / "g.sqlite"))


def _routes(app) -> list[tuple[str, str]]:
    """Every route of the app as (method, a URL of it), the static files included."""
    out = []
    for rule in app.url_map.iter_rules():
        values = {
            arg: {"filename": "app.css", "number": 1}.get(arg, A if arg == "assignment" else Q)
            for arg in rule.arguments
        }
        path = rule.build(values)[1] if rule.arguments else rule.rule
        out += [(m, path) for m in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return out


def test_every_route_answers_403_without_the_token(app):
    client = app.test_client()
    routes = _routes(app)
    assert ("GET", "/static/app.css") in routes and ("GET", "/") in routes and len(routes) >= 4
    for method, path in routes:
        assert client.open(path, method=method).status_code == 403, (method, path)


def test_a_wrong_token_or_cookie_is_refused(app):
    client = app.test_client()
    assert client.get("/?token=" + TOKEN[:-1] + "x").status_code == 403
    client.set_cookie(cookie_name(TOKEN), "not-the-token")
    assert client.get("/").status_code == 403


def test_the_token_sets_an_httponly_strict_cookie_and_leaves_the_url(app):
    client = app.test_client()
    response = client.get(f"/a/{A}/q/{Q}?token={TOKEN}&x=1")
    assert response.status_code == 303
    assert response.headers["Location"] == f"/a/{A}/q/{Q}?x=1"
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = client.get("/")
    assert page.status_code == 200 and TOKEN not in page.get_data(as_text=True)
    with client.get("/static/app.css") as css:
        assert css.status_code == 200 and css.mimetype == "text/css"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:5000", "127.0.0.2", "localhost.evil.example"])
def test_a_foreign_host_header_is_refused_even_with_the_token(app, host):
    client = app.test_client()
    login(client)
    assert client.get("/", headers={"Host": host}).status_code == 400


def test_a_served_app_accepts_only_its_own_port(app):
    app.config["REVIEW_PORT"] = 8123
    client = app.test_client()
    login_response = client.get(f"/?token={TOKEN}", headers={"Host": "127.0.0.1:8123"})
    assert login_response.status_code == 303
    assert client.get("/", headers={"Host": "127.0.0.1:8123"}).status_code == 200
    assert client.get("/", headers={"Host": "127.0.0.1:8124"}).status_code == 400
    assert client.get("/", headers={"Host": "localhost"}).status_code == 400


def test_a_post_without_the_csrf_token_is_refused(app):
    client = app.test_client()
    login(client)
    assert client.post("/grader", data={"name": "mallory"}).status_code == 403
    assert client.post("/grader", data={"name": "mallory", "csrf": "0" * 64}).status_code == 403
    with app.test_request_context():
        good = csrf_token()
    assert client.post("/grader", data={"name": "ta", "csrf": good}).status_code == 303
    assert client.post("/grader", data={"name": "ta"}, headers={"X-CSRF-Token": good}).status_code == 303


def test_every_response_carries_the_security_headers(app):
    client = app.test_client()
    for response in (client.get("/"), client.get("/?token=x")):
        assert response.headers["Content-Security-Policy"] == CSP
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert response.headers["Cache-Control"] == "no-store"


def test_each_browser_sets_its_own_grader_name_shown_in_the_header(app):
    ta, prof = app.test_client(), app.test_client()
    login(ta)
    login(prof)
    with app.test_request_context():
        good = csrf_token()
    ta.post("/grader", data={"name": "<b>ta</b>", "csrf": good, "next": "/"})
    assert 'value="&lt;b&gt;ta&lt;/b&gt;"' in ta.get("/").get_data(as_text=True)
    assert 'value="prof"' in prof.get("/").get_data(as_text=True)


def test_the_app_refuses_a_short_token_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"token: expected at least 32 characters, got 5"):
        make_app_with_token(tmp_path, "short")


def make_app_with_token(tmp_path, token):
    from conftest import ROOT

    from course_lib.autograder.review_app import create_app

    return create_app(tmp_path / "g.sqlite", exercises=ROOT, solutions=ROOT, token=token, grader="x")


@pytest.mark.parametrize("target", ["//evil.example/", "/\\evil.example/", "https://evil.example/", ""])
def test_setting_the_grader_name_never_redirects_to_another_site(app, target):
    client = app.test_client()
    login(client)
    with app.test_request_context():
        good = csrf_token()
    response = client.post("/grader", data={"name": "ta", "csrf": good, "next": target})
    assert response.status_code == 303 and response.headers["Location"] == "/"


def test_only_the_apps_own_static_files_are_served(app):
    client = app.test_client()
    login(client)
    assert client.get("/static/app.js").mimetype == "text/javascript"
    for path in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/templates/base.html", "/static/nothing.css"):
        assert client.get(path).status_code == 404, path
