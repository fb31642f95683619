"""Show ``course_lib``'s own source where a chapter explains it, folded behind a toggle.

A chapter writes, where it has explained a mechanism::

    ```{implementation} course_lib.softmax.softmax
    ```

and the page shows a closed ``<details>`` ("Our implementation: ``softmax``, from
``course_lib/softmax.py``. Try the notebook first.") holding the object's source, read
from the file by Sphinx's ``literalinclude`` with ``:pyobject:`` at build time: never a
second copy, so the page cannot drift from the code that is graded and tested. The
argument is ``<module>.<object>``, where the object may be a method
(``course_lib.transformer.Transformer.decode_step``). An argument that names no module
file or no object in it is a build error.

Instructors who grade the exercises can build the book without these listings:
``BOOK_IMPLEMENTATIONS=hide make book`` (Sphinx config value ``book_implementations``,
``"show"`` by default). The listing is then replaced by one sentence that says the code is
left to the exercise notebook. Changing the value makes Sphinx read every page again.

The HTML carries ``data-object`` with the dotted name, which the tests use to compare
every listing with ``inspect.getsource`` (tests/book/test_book_listings.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from docutils import nodes
from sphinx.directives.code import LiteralInclude
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

CHOICES = ("show", "hide")


class implementation_node(nodes.General, nodes.Element):  # docutils names nodes in lower case
    """A folded listing of one object's source (``<details>`` in HTML)."""


def _split(target: str, srcdir: Path) -> tuple[Path, str]:
    """``course_lib.x.f`` -> (the module's file, ``f``); the longest module prefix that is a file wins."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = srcdir.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return path, ".".join(parts[cut:])
    raise ExtensionError(f"implementation: no module file for {target!r} under {srcdir}")


class Implementation(SphinxDirective):
    """``{implementation} course_lib.module.object``: the object's source, folded."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        target = self.arguments[0]
        path, obj = _split(target, Path(self.env.srcdir))
        name = obj  # e.g. "softmax", "Transformer.decode_step"
        relative = path.relative_to(self.env.srcdir).as_posix()
        if self.config.book_implementations == "hide":
            para = nodes.paragraph()
            para += nodes.Text("The code of ")
            para += nodes.literal(text=name)
            para += nodes.Text(" is left to the exercise notebook in this edition of the book.")
            para["classes"].append("implementation-hidden")
            return [para]
        include = LiteralInclude(
            "literalinclude",
            ["/" + relative],  # "/" = relative to the source directory
            {"pyobject": obj, "language": "python", "dedent": None},
            self.content,
            self.lineno,
            self.content_offset,
            self.block_text,
            self.state,
            self.state_machine,
        )
        listing = include.run()
        if not listing or not isinstance(listing[0], nodes.literal_block):
            raise ExtensionError(f"implementation: {obj!r} not found in {relative}")
        node = implementation_node(target=target, name=name, path=relative)
        node += listing
        return [node]


def _visit_html(self, node: implementation_node) -> None:
    self.body.append(
        f'<details class="implementation" data-object="{node["target"]}">'
        f"<summary>Our implementation: <code>{node['name']}</code>, from "
        f"<code>{node['path']}</code>. Try the notebook first.</summary>"
    )


def _depart_html(self, node: implementation_node) -> None:
    self.body.append("</details>")


def _check_choice(app, config) -> None:
    if config.book_implementations not in CHOICES:
        raise ExtensionError(
            f"book_implementations (BOOK_IMPLEMENTATIONS) must be one of {CHOICES}, got {config.book_implementations!r}"
        )


def setup(app):
    app.add_config_value("book_implementations", os.environ.get("BOOK_IMPLEMENTATIONS", "show"), "env")
    app.add_node(implementation_node, html=(_visit_html, _depart_html))
    app.add_directive("implementation", Implementation)
    app.connect("config-inited", _check_choice)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
