"""Bar charts drawn on the server as inline SVG (no JavaScript): the bars' geometry here,
their markup in templates/macros.html."""

from __future__ import annotations

from dataclasses import dataclass

HEIGHT = 80
BAR_GAP = 2


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    x: int
    y: int
    width: int
    height: int


def bars(values: list[tuple[str, int]], bar_width: int = 14) -> list[Bar]:
    """One bar per (label, value), scaled to the largest; a zero is a bar of no height."""
    top = max((value for _, value in values), default=0) or 1
    drawn = []
    for index, (label, value) in enumerate(values):
        height = round(HEIGHT * value / top)
        drawn.append(Bar(label, int(value), index * (bar_width + BAR_GAP), HEIGHT - height,
                         bar_width, height))
    return drawn
