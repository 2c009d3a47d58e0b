"""Bar charts drawn on the server as inline SVG (no JavaScript): the bars' geometry here,
their markup in templates/macros.html."""

from __future__ import annotations

from dataclasses import dataclass

HEIGHT = 80
BAR_GAP = 2
# A label's width per character, in the chart's units (its text is 9 of them high): a bar
# under its own label is made at least this wide for it, or the labels of "Routers by last
# poll" ran into each other.
LABEL_UNITS_PER_CHARACTER = 5.5
LABEL_MARGIN = 8


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    x: int
    y: int
    width: int
    height: int


def bars(values: list[tuple[str, int]], bar_width: int = 14, labelled: bool = False
         ) -> list[Bar]:
    """One bar per (label, value), scaled to the largest; a zero is a bar of no height.
    `labelled`: each bar is shown with its label under it, so is wide enough for it."""
    if labelled:
        longest = max((len(label) for label, _ in values), default=0)
        bar_width = max(bar_width, round(longest * LABEL_UNITS_PER_CHARACTER) + LABEL_MARGIN)
    top = max((value for _, value in values), default=0) or 1
    drawn = []
    for index, (label, value) in enumerate(values):
        height = round(HEIGHT * value / top)
        drawn.append(Bar(label, int(value), index * (bar_width + BAR_GAP), HEIGHT - height,
                         bar_width, height))
    return drawn
