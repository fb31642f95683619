"""Schematic diagrams for the book: one style, drawn with matplotlib when the book builds.

Every chapter draws its architecture pictures with this module, so that boxes, arrows,
colours and lettering look the same on every page. A diagram is a :class:`Canvas` in
"units" (one unit is about the height of a box); the helpers place boxes, tensors drawn
as grids, arrows and labels, and :meth:`Canvas.show` puts the result into the page as
SVG (text is drawn as paths, so no font is needed to read it).

In a chapter::

    from schematics import Canvas

    c = Canvas(8, 3)
    q = c.box(1, 1.5, "query $q$", kind="query")
    k = c.box(4, 1.5, "keys $K$", kind="key")
    c.arrow(q, k, "score")
    c.show()

and in the cell's metadata a caption, alt text and the ``schematic`` class::

    ```{code-cell} ipython3
    :tags: [remove-input]
    :mystnb:
    :  figure:
    :    caption: One query scored against every key.
    :    name: fig-example
    :  image:
    :    alt: A box labelled query with an arrow to a box labelled keys.
    :    classes: schematic
    ```

The pictures have a white background, and they keep it in the theme's dark mode: the
stylesheet ``book/_static/schematics.css`` does not invert images of class ``schematic``
(the theme shows them slightly dimmed on a light card), because their shading carries
meaning ("darker = larger", "shaded = may attend") that an inversion would turn false.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Literal

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

# A diagram is a bare Figure, not a pyplot figure: it never touches pyplot's backend, so a
# chapter's own plots still reach the page through the notebook's inline backend (calling
# matplotlib.use("Agg") here switched it off for every plot after the import).

__all__ = ["PALETTE", "Canvas", "Box"]

#: Fill colours by role, used the same way in every chapter: queries blue, keys orange,
#: values green, attention weights purple, masks grey, everything else neutral. Light
#: tints keep black lettering readable, in the theme's dark mode too (never inverted).
PALETTE: dict[str, str] = {
    "query": "#cfe2f3",
    "key": "#fce5cd",
    "value": "#d9ead3",
    "weight": "#e1d5f0",
    "mask": "#d9d9d9",
    "state": "#fff2cc",
    "norm": "#f4cccc",
    "neutral": "#f3f3f3",
    "output": "#d0e0e3",
    "none": "none",
}
#: Stroke colours that go with the fills (a darker shade of each).
EDGE: dict[str, str] = {
    "query": "#3d6fa8",
    "key": "#b45f06",
    "value": "#38761d",
    "weight": "#674ea7",
    "mask": "#666666",
    "state": "#bf9000",
    "norm": "#990000",
    "neutral": "#444444",
    "output": "#134f5c",
    "none": "#444444",
}
INK = "#1a1a1a"  # lettering and arrows
FONT_SIZE = 11.0  # points; small print is FONT_SIZE - 2
UNIT_INCHES = 0.62  # one unit on the page (a diagram 12 units wide is about 7.4 inches)

Anchor = Literal["left", "right", "top", "bottom", "center"]


@dataclass(frozen=True)
class Box:
    """A placed rectangle: centre ``(x, y)``, width ``w`` and height ``h`` in units."""

    x: float
    y: float
    w: float
    h: float

    def at(self, side: Anchor = "center", offset: float = 0.0) -> tuple[float, float]:
        """The point in the middle of one side (``offset`` slides along that side)."""
        if side == "left":
            return self.x - self.w / 2, self.y + offset
        if side == "right":
            return self.x + self.w / 2, self.y + offset
        if side == "top":
            return self.x + offset, self.y + self.h / 2
        if side == "bottom":
            return self.x + offset, self.y - self.h / 2
        return self.x, self.y


Point = tuple[float, float]


class Canvas:
    """A diagram ``width`` x ``height`` units large, origin at the bottom left.

    Args:
        width, height: size in units.
        unit: inches per unit (the default suits a full-width figure in the book).
    """

    def __init__(self, width: float, height: float, unit: float = UNIT_INCHES):
        self.width, self.height = width, height
        self.fig = Figure(figsize=(width * unit, height * unit))
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        self.fig.patch.set_facecolor("white")

    def _add(self, patch):
        # add_artist, not add_patch: the limits are fixed, and add_patch's update of the data
        # limits cost most of the drawing time of a diagram with many cells (same picture).
        self.ax.add_artist(patch)

    # -- shapes --------------------------------------------------------------------------
    def box(
        self,
        x: float,
        y: float,
        text: str = "",
        kind: str = "neutral",
        w: float = 1.8,
        h: float = 0.8,
        fontsize: float | None = None,
        rounded: bool = True,
        dashed: bool = False,
    ) -> Box:
        """A labelled box centred at ``(x, y)``; ``kind`` picks the colour (see :data:`PALETTE`)."""
        style = "round,pad=0,rounding_size=0.12" if rounded else "square,pad=0"
        patch = FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle=style,
            facecolor=PALETTE[kind],
            edgecolor=EDGE[kind],
            linewidth=1.3,
            linestyle="--" if dashed else "-",
            zorder=2,
        )
        self._add(patch)
        if text:
            self.text(x, y, text, fontsize=fontsize)
        return Box(x, y, w, h)

    def group(
        self,
        boxes: list[Box],
        label: str = "",
        pad: float = 0.25,
        kind: str = "none",
        label_side: Literal["top", "bottom"] = "top",
    ) -> Box:
        """A dashed frame around ``boxes`` (a sublayer, a head, a stack), with an optional label."""
        x0 = min(b.x - b.w / 2 for b in boxes) - pad
        x1 = max(b.x + b.w / 2 for b in boxes) + pad
        y0 = min(b.y - b.h / 2 for b in boxes) - pad
        y1 = max(b.y + b.h / 2 for b in boxes) + pad
        frame = FancyBboxPatch(
            (x0, y0),
            x1 - x0,
            y1 - y0,
            boxstyle="round,pad=0,rounding_size=0.2",
            facecolor=PALETTE[kind],
            edgecolor="#888888",
            linewidth=1.0,
            linestyle="--",
            zorder=1,
            alpha=0.5 if kind != "none" else 1.0,
        )
        self._add(frame)
        if label:
            ly = y1 + 0.22 if label_side == "top" else y0 - 0.22
            self.text((x0 + x1) / 2, ly, label, fontsize=FONT_SIZE - 1, color="#555555")
        return Box((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0)

    def tensor(
        self,
        x: float,
        y: float,
        rows: int,
        cols: int,
        kind: str = "neutral",
        cell: float = 0.28,
        label: str = "",
        shape: str = "",
        values: list[list[float]] | None = None,
        label_side: Literal["top", "bottom", "left", "right"] = "top",
    ) -> Box:
        """A tensor drawn as a ``rows`` x ``cols`` grid of cells centred at ``(x, y)``.

        ``label`` names it (``"$Q$"``) and ``shape`` gives its shape (``"(L, D)"``), printed
        below the grid. ``values`` in [0, 1] shade the cells (for attention weights).
        """
        w, h = cols * cell, rows * cell
        x0, y0 = x - w / 2, y - h / 2
        for i in range(rows):
            for j in range(cols):
                face = PALETTE[kind]
                alpha = 1.0
                if values is not None:
                    face, alpha = EDGE[kind], 0.08 + 0.92 * float(values[i][j])
                self._add(
                    Rectangle(
                        (x0 + j * cell, y0 + (rows - 1 - i) * cell),
                        cell,
                        cell,
                        facecolor=face,
                        alpha=alpha,
                        edgecolor="none",
                        zorder=2,
                    )
                )
                self._add(
                    Rectangle(
                        (x0 + j * cell, y0 + (rows - 1 - i) * cell),
                        cell,
                        cell,
                        facecolor="none",
                        edgecolor=EDGE[kind],
                        linewidth=0.6,
                        zorder=3,
                    )
                )
        box = Box(x, y, w, h)
        if label:
            lx, ly = {
                "top": (x, y + h / 2 + 0.25),
                "bottom": (x, y - h / 2 - 0.25),
                "left": (x0 - 0.3, y),
                "right": (x0 + w + 0.3, y),
            }[label_side]
            ha = {"left": "right", "right": "left"}.get(label_side, "center")
            self.text(lx, ly, label, ha=ha)
        if shape:
            sy = y - h / 2 - (0.55 if label_side == "bottom" else 0.25)
            self.text(x, sy, shape, fontsize=FONT_SIZE - 2, color="#555555")
        return box

    # -- lines and words -------------------------------------------------------------------
    def arrow(
        self,
        start: Box | Point,
        end: Box | Point,
        text: str = "",
        start_side: Anchor | None = None,
        end_side: Anchor | None = None,
        curve: float = 0.0,
        dashed: bool = False,
        color: str = INK,
        text_offset: tuple[float, float] = (0.0, 0.18),
        fontsize: float | None = None,
        both: bool = False,
    ) -> None:
        """An arrow from ``start`` to ``end`` (boxes or points), with an optional label at its middle.

        For boxes the sides default to the ones facing each other; ``curve`` bends the arrow
        (positive: counter-clockwise).
        """
        p0, p1 = self._ends(start, end, start_side, end_side)
        style = "<|-|>" if both else "-|>"
        patch = FancyArrowPatch(
            p0,
            p1,
            arrowstyle=style,
            mutation_scale=12,
            color=color,
            linewidth=1.2,
            linestyle="--" if dashed else "-",
            shrinkA=1,
            shrinkB=1,
            connectionstyle=f"arc3,rad={curve}",
            zorder=4,
        )
        self._add(patch)
        if text:
            mx, my = (p0[0] + p1[0]) / 2 + text_offset[0], (p0[1] + p1[1]) / 2 + text_offset[1]
            self.text(mx, my, text, fontsize=fontsize or FONT_SIZE - 1, background=True)

    def line(self, points: list[Point], dashed: bool = False, color: str = INK, arrow_end: bool = True) -> None:
        """A polyline through ``points`` (for routed connections such as residual paths)."""
        xs, ys = zip(*points, strict=False)
        self.ax.plot(
            xs[:-1] if arrow_end else xs,
            ys[:-1] if arrow_end else ys,
            color=color,
            linewidth=1.2,
            linestyle="--" if dashed else "-",
            zorder=4,
            solid_capstyle="round",
        )
        if arrow_end:
            self.arrow(points[-2], points[-1], dashed=dashed, color=color)

    def text(
        self,
        x: float,
        y: float,
        s: str,
        fontsize: float | None = None,
        color: str = INK,
        ha: str = "center",
        va: str = "center",
        background: bool = False,
        weight: str = "normal",
    ) -> None:
        """Lettering centred at ``(x, y)``; ``$...$`` is typeset as mathematics."""
        kw = {}
        if background:
            kw["bbox"] = {"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.9}
        self.ax.text(
            x, y, s, fontsize=fontsize or FONT_SIZE, color=color, ha=ha, va=va, zorder=5, fontweight=weight, **kw
        )

    def title(self, s: str) -> None:
        """A heading along the top edge."""
        self.text(self.width / 2, self.height - 0.3, s, fontsize=FONT_SIZE + 1, weight="bold")

    # -- output ------------------------------------------------------------------------------
    def svg(self) -> str:
        """The diagram as SVG text."""
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "schematics"}):
            self.fig.savefig(buf, format="svg", facecolor="white", metadata={"Date": None})
        return buf.getvalue()

    def show(self):
        """Put the diagram into the page as SVG (the value of the cell's last line)."""
        from IPython.display import SVG

        return SVG(self.svg())

    @staticmethod
    def _ends(start, end, start_side, end_side) -> tuple[Point, Point]:
        def centre(p):
            return (p.x, p.y) if isinstance(p, Box) else p

        (sx, sy), (ex, ey) = centre(start), centre(end)
        if isinstance(start, Box):
            side = start_side or _facing(sx, sy, ex, ey, start)
            start = start.at(side)
        if isinstance(end, Box):
            side = end_side or _facing(ex, ey, sx, sy, end)
            end = end.at(side)
        return start, end


def _facing(x, y, ox, oy, box: Box) -> Anchor:
    """The side of ``box`` (at ``x, y``) that faces the point ``(ox, oy)``."""
    dx, dy = ox - x, oy - y
    if abs(dx) * box.h >= abs(dy) * box.w:
        return "right" if dx > 0 else "left"
    return "top" if dy > 0 else "bottom"
