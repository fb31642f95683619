"""The review app: :func:`create_app` and what every page shares (the gradebook, the grader's name)."""

from __future__ import annotations

from pathlib import Path

from flask import Flask, abort, redirect, request, url_for
from werkzeug.wrappers import Response

from .answers import answers
from .context import close_gradebook
from .held import held
from .pairs import pairs
from .security import install_guards

__all__ = ["create_app", "MAX_NAME"]

#: The longest grader's name kept (a longer one is cut).
MAX_NAME = 80


def create_app(db: str | Path, *, exercises: str | Path, solutions: str | Path, token: str, grader: str) -> Flask:
    """The review app of one gradebook.

    Args:
        db: the gradebook (SQLite) every request opens.
        exercises: the folder of the exercise notebooks (the questions' text).
        solutions: the folder of the solution notebooks.
        token: the access token (at least 32 characters; the URL printed carries it).
        grader: the name decisions are saved with until a browser sets its own.

    Returns:
        The Flask app (serve it with :func:`.serve`).

    Raises:
        ValueError: a token shorter than 32 characters, or an empty grader's name.
    """
    if len(token) < 32:
        raise ValueError(f"token: expected at least 32 characters, got {len(token)}")
    if not grader.strip():
        raise ValueError(f"grader: expected a name, got {grader!r}")
    # the static files are served from memory (_static_files): a browser that drops a request
    # half-way would leave werkzeug's open file to the garbage collector
    app = Flask(__name__, static_folder=None)
    app.config.update(
        STORE_DB=str(db),
        EXERCISES=str(exercises),
        SOLUTIONS=str(solutions),
        REVIEW_TOKEN=token,
        REVIEW_GRADER=grader.strip()[:MAX_NAME],
        REVIEW_PORT=None,
        MAX_CONTENT_LENGTH=2 * 1024 * 1024,
    )
    app.jinja_env.trim_blocks = app.jinja_env.lstrip_blocks = True
    install_guards(app)
    app.teardown_appcontext(close_gradebook)
    app.add_url_rule("/grader", "set_grader", _set_grader_name, methods=["POST"])
    files = _static_files()
    app.add_url_rule("/static/<path:filename>", "static", lambda filename: _static(files, filename))
    for blueprint in (answers, held, pairs):
        app.register_blueprint(blueprint)
    return app


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The app's style sheets and script (``static/``): name -> (content, MIME type)."""
    folder = Path(__file__).with_name("static")
    types = {".css": "text/css", ".js": "text/javascript"}
    return {
        p.name: (p.read_bytes(), types.get(p.suffix, "application/octet-stream"))
        for p in folder.iterdir()
        if p.is_file()
    }


def _static(files: dict[str, tuple[bytes, str]], filename: str) -> Response:
    """GET /static/NAME: one of the app's own files (404 for any other name)."""
    if filename not in files:
        abort(404)
    data, mimetype = files[filename]
    return Response(data, mimetype=mimetype)


def _set_grader_name() -> Response:
    """POST /grader: this browser's grader's name (a cookie), then back to the page it came from."""
    name = request.form.get("name", "").strip()
    if not name:
        abort(400, "name: expected a grader's name, got an empty one")
    back = request.form.get("next", "")
    # only a path of this server: "//host" and "/\\host" are other sites to a browser
    target = back if back.startswith("/") and not back.startswith(("//", "/\\")) else url_for("answers.index")
    response = redirect(target, code=303)
    response.set_cookie("grader", name[:MAX_NAME], httponly=True, samesite="Strict", path="/")
    return response
