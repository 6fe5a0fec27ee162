"""Tables that fit the terminal they are printed on.

A table is first drawn boxed, every cell on one line. When that is wider than the terminal it is
drawn again with a lighter frame (a rule under the header, two spaces between columns) and the
cells' compact forms (``reserved_3y`` as ``res. 3y``); then the columns that may fold (wrap onto
more lines: scopes, instance types, locations) give up width in their fold order, down to their
narrowest; only when folding is not enough are the columns that may be left out dropped, in their
drop order, and the table says which. A column that neither folds nor drops (a price, a count, a
market) is always printed whole: where even that cannot fit, each row is printed as a card of
"header  value" lines instead. ``--output json|csv`` never pass through here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.cells import cell_len

FRAME = 3  # a boxed table: "│ " + cell + " " per column, and one closing "│"
GAP = 2  # the light frame: two spaces between columns, nothing at the edges


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    fold: int | None = None  # the order in which it wraps onto more lines (1 first); None: never
    narrowest: int = 8  # the width a folded column keeps at least
    drop: int | None = None  # the order in which it is left out when folding is not enough; None: never
    compact: Callable[[str], str] | None = None  # a shorter form of a cell for narrow terminals


def _compact(c: Column, cell: str) -> str:
    return cell if c.compact is None else c.compact(cell)


def _widest(header: str, cells: Sequence[str]) -> int:
    return max([cell_len(header), *(max((cell_len(line) for line in c.splitlines()), default=0) for c in cells)])


def fit(title: str | Any, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Any:
    """A rich Table of ``rows`` under ``columns`` no wider than ``width`` (see the module docstring)."""
    from rich import box
    from rich.table import Table

    cols = list(range(len(columns)))
    natural = [_widest(columns[i].header, [r[i] for r in rows]) for i in cols]
    if sum(natural) + FRAME * len(cols) + 1 <= width:
        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(c.header, justify=c.justify, no_wrap=True)
        for r in rows:
            table.add_row(*r)
        return table
    cells = [[_compact(columns[i], r[i]) for i in cols] for r in rows]
    widths = [_widest(columns[i].header, [r[i] for r in cells]) for i in cols]

    def least(i: int) -> int:
        c = columns[i]
        return widths[i] if c.fold is None else min(widths[i], max(c.narrowest, *(len(w) for w in c.header.split())))

    keep = list(cols)
    dropped: list[str] = []
    droppable = sorted((columns[i].drop or 0, i) for i in cols if columns[i].drop is not None)
    while droppable and sum(least(i) for i in keep) + GAP * (len(keep) - 1) > width:
        _order, i = droppable.pop(0)
        keep.remove(i)
        dropped.append(columns[i].header)
    if sum(least(i) for i in keep) + GAP * (len(keep) - 1) > width:
        return _cards(title, columns, cells, width)
    given = {i: widths[i] for i in keep}
    excess = sum(given.values()) + GAP * (len(keep) - 1) - width
    for i in sorted((i for i in keep if columns[i].fold is not None), key=lambda i: columns[i].fold or 0):
        if excess <= 0:
            break
        give = min(excess, given[i] - least(i))
        given[i] -= give
        excess -= give
    if dropped:
        note = f"  (narrow terminal: {', '.join(dropped)} left out)"
        title = f"{title}{note}" if isinstance(title, str) else title
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for i in keep:
        c = columns[i]
        folds = c.fold is not None and given[i] < widths[i]
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=not folds,
            overflow="fold",
            width=given[i] if folds else None,
            min_width=None if folds else widths[i],
        )
    for r in cells:
        table.add_row(*(r[i] for i in keep))
    return table


def pairs(rows: Sequence[tuple[str, str]], width: int) -> Any:
    """Label/value lines (a plan's summary): the label column folds before the values do, so
    that no value is ever pushed off the screen."""
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    labels = max((cell_len(a) for a, _b in rows), default=0)
    values = max((cell_len(b) for _a, b in rows), default=0)
    if labels + values + 2 <= width:
        table.add_column(no_wrap=True)
        table.add_column()
    else:  # the labels get at most 45% of the line (and at least 20 columns), the values the rest
        label_width = max(20, min(labels, width * 45 // 100, width - min(values, width // 2) - 2))
        table.add_column(width=label_width, overflow="fold")
        table.add_column(overflow="fold")
    for a, b in rows:
        table.add_row(a, b)
    return table


def _cards(title: str | Any, columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int) -> Any:
    """Each row as a card: one "header  value" line per column that has a value."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [Text(title) if isinstance(title, str) else title]
    for k, r in enumerate(cells):
        lines = [(c.header, v) if c.header else (v, "") for c, v in zip(columns, r, strict=True) if v]
        parts.append(pairs(lines, width))
        if k < len(cells) - 1:
            parts.append(Text(""))
    return Group(*parts)
