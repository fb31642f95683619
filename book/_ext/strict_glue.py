"""A glue that cannot be resolved stops the build: never an empty span in a page.

The book puts computed numbers into its prose with myst-nb's glue
(``{glue:text}`name:.1%```). When ``name`` was never glued (a typo, a renamed variable, a
cell that no longer runs), myst-nb 1.4 logs a warning and renders nothing in its place.
With ``-W`` that warning fails the first build, but Sphinx does not read an unchanged page
again: run the same build a second time and it succeeds, with the empty span in the page.

This extension turns every myst-nb glue warning (type ``mystnb``, subtype ``glue``: a
missing key, a missing cross-document key, a format that does not apply to the value) into
an error. During reading Sphinx holds warnings back and lets them through only after every
page is read, before it saves the environment; the error is raised at that moment, so the
broken page is never recorded as read and every later build fails in the same way until the
name exists. ``suppress_warnings = ["mystnb.glue"]`` still silences it.
"""

from __future__ import annotations

import logging

from sphinx.errors import ExtensionError
from sphinx.util.logging import NAMESPACE, WarningStreamHandler


class GlueError(ExtensionError):
    category = "Glue error"


class _GlueIsError(logging.Filter):
    """A filter on Sphinx's warning stream that raises on a glue warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "type", None) == "mystnb" and getattr(record, "subtype", None) == "glue":
            # Sphinx's record already reads "path:line: WARNING: message [mystnb.glue]".
            raise GlueError(record.getMessage().replace("WARNING: ", "", 1))
        return True


def _install(app) -> None:
    for handler in logging.getLogger(NAMESPACE).handlers:
        if isinstance(handler, WarningStreamHandler) and not any(isinstance(f, _GlueIsError) for f in handler.filters):
            # After Sphinx's own filters, so that suppress_warnings still applies.
            handler.addFilter(_GlueIsError())


def setup(app):
    app.connect("builder-inited", _install)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
