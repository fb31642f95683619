"""Make the built book work offline and open without console errors.

- MathJax 3 is served from the built site instead of a CDN. Its files come from the
  ``django-static-mathjax`` package (a registry package that ships MathJax's ``es5``
  build), so building and reading the book need no network.
- sphinx-thebe registers its inline configuration script once per read of the sources;
  Jupyter Book reads twice, and the second ``const THEBE_JS_URL`` is a JavaScript error
  in every page. Identical scripts are emitted once.
- The single-page build (``--builder singlehtml``, which ``make pdf`` prints) renders every
  node the ``html`` build renders. Sphinx falls back to a builder's format (``html``) for
  node handlers only when no extension registered any for the builder's own name;
  sphinx-exercise registers ``singlehtml`` handlers, so myst-nb's hidden-input cells had
  none there and the build failed. The ``html`` handlers are copied where missing.
- docutils writes the bibliography as ``<div role="list">`` of ``role="doc-biblioentry"``
  entries; ARIA requires a list's children to be list items, so screen readers get a list
  with no items (axe-core: aria-required-children, critical). The entries become
  ``role="listitem"``.
- Sphinx copies ``html_static_path`` only when some page is out of date, so a change to
  ``book/_static/*.css`` alone never reached a built book. A static file that differs from
  its copy in the output marks the root page out of date, which makes Sphinx copy them all.
"""

import filecmp
import shutil
from pathlib import Path

import mathjax  # django-static-mathjax

ES5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _use_local_mathjax(app, config):
    config.mathjax_path = "mathjax/tex-mml-chtml.js"  # relative: served from _static/


def _copy_mathjax(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copytree(ES5, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # An inline script's file name is None from one caller and "" from another.
        key = str(script).replace("_JavaScript(None,", "_JavaScript('',")
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _singlehtml_handlers_from_html(app):
    if app.builder.name == "singlehtml":
        handlers = app.registry.translation_handlers
        single = handlers.setdefault("singlehtml", {})
        for node, pair in handlers.get("html", {}).items():
            single.setdefault(node, pair)


def _citations_as_list_items(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if isinstance(body, str) and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def _static_files_changed(app, env, added, changed, removed):
    if app.builder.format != "html":
        return []
    out = Path(app.outdir) / "_static"
    for entry in app.config.html_static_path:
        for source in (Path(app.confdir) / entry).rglob("*"):
            copy = out / source.relative_to(Path(app.confdir) / entry)
            if source.is_file() and not (copy.is_file() and filecmp.cmp(source, copy, shallow=False)):
                return [app.config.root_doc]
    return []


def setup(app):
    if not (ES5 / "tex-mml-chtml.js").is_file():
        raise RuntimeError(f"MathJax not found at {ES5}; install django-static-mathjax")
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("builder-inited", _singlehtml_handlers_from_html)
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.connect("html-page-context", _citations_as_list_items)
    app.connect("build-finished", _copy_mathjax)
    app.connect("env-get-outdated", _static_files_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
