"""One LaTeX formula as safe MathML, for pages that carry no script.

latex2mathml converts the formula; its output is then parsed as XML and written again from
:data:`ELEMENTS` and :data:`ATTRIBUTES` only, every text and attribute value escaped. This
matters: latex2mathml passes ``\\text{<b>..</b>}`` through as markup and turns
``\\href{javascript:..}`` into an ``href`` attribute and ``\\style{..}`` into a ``style`` one.
A formula that latex2mathml cannot convert, whose output is not well-formed or holds an
element not on the list, that nests deeper than :data:`MAX_DEPTH`, or that is longer than
:data:`MAX_FORMULA_CHARS` (the work stays bounded) is shown as escaped code instead.
"""

from __future__ import annotations

import functools
from html import escape
from xml.etree import ElementTree

from latex2mathml.converter import convert

__all__ = ["formula_html", "ELEMENTS", "ATTRIBUTES", "MAX_FORMULA_CHARS", "MAX_DEPTH"]

#: A longer formula is shown as code, not converted.
MAX_FORMULA_CHARS = 2_000
#: A formula whose MathML nests deeper is shown as code.
MAX_DEPTH = 60
_NS = "{http://www.w3.org/1998/Math/MathML}"
#: The MathML elements written (presentation MathML, no ``maction``, no ``semantics``/annotations).
ELEMENTS = frozenset(
    "math mrow mi mn mo ms mtext mspace msqrt mroot mfrac msub msup msubsup munder mover munderover "
    "mtable mtr mtd mlabeledtr mstyle mpadded mphantom menclose merror mmultiscripts mprescripts none "
    "mfenced".split()
)
#: The attributes written (presentation only: no ``href``, ``style``, ``class``, ``id`` or event handler).
ATTRIBUTES = frozenset(
    "display mathvariant stretchy fence separator lspace rspace form accent accentunder movablelimits "
    "columnalign rowalign rowspacing columnspacing columnlines rowlines frame framespacing minsize maxsize "
    "symmetric largeop linethickness width height depth displaystyle scriptlevel notation open close "
    "separators mathsize mathcolor mathbackground columnspan rowspan equalrows equalcolumns bevelled "
    "voffset align".split()
)


class _Unsafe(ValueError):
    """The MathML has something not on the lists, or nests too deep."""


def _write(node: ElementTree.Element, out: list[str], depth: int) -> None:
    tag = node.tag.removeprefix(_NS)
    if tag not in ELEMENTS or depth > MAX_DEPTH:
        raise _Unsafe(tag)
    attrs = "".join(
        f' {name}="{escape(value, quote=True)}"' for name, value in sorted(node.attrib.items()) if name in ATTRIBUTES
    )
    if tag == "math":
        attrs = ' xmlns="http://www.w3.org/1998/Math/MathML"' + attrs
    out.append(f"<{tag}{attrs}>{escape(node.text or '', quote=False)}")
    for child in node:
        _write(child, out, depth + 1)
        out.append(escape(child.tail or "", quote=False))
    out.append(f"</{tag}>")


def _code(latex: str, display: bool) -> str:
    return f'<code class="math-source">{escape(("$$%s$$" if display else "$%s$") % latex, quote=False)}</code>'


@functools.lru_cache(maxsize=8192)
def formula_html(latex: str, display: bool = False) -> str:
    """A formula as MathML (``display="block"`` when ``display``), or as escaped code.

    Args:
        latex: the formula's LaTeX, without its delimiters.
        display: a display formula (``$$..$$``) rather than one in the text.

    Returns:
        ``<math ...>...</math>``, or ``<code class="math-source">$..$</code>`` when it cannot
        be converted safely (see the module's docstring).
    """
    if len(latex) > MAX_FORMULA_CHARS or not latex.strip():
        return _code(latex, display)
    try:
        tree = ElementTree.fromstring(convert(latex, display="block" if display else "inline"))
        out: list[str] = []
        _write(tree, out, 0)
    except Exception:  # noqa: BLE001 - latex2mathml's failure on a student's formula is not ours
        return _code(latex, display)
    return "".join(out)
