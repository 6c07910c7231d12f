"""A headline table fitted to a terminal's width with every interval on one row.

rich shrinks a wide table by wrapping its widest cells at any space, so "1.85x [1.84, 1.88]"
broke into two rows at 120 columns. Here each column gets a width of its own: its cells' full
width where the table fits, else no less than its widest unbreakable piece (an interval with
its factor and " ns", a word, a header's longest word); the first column (the row labels)
wraps first. A table that does not fit even then is split by columns into several tables,
each with the first column, so that every row stays one row.
"""
from __future__ import annotations

import re

from rich import box
from rich.table import Table
from rich.text import Text

# "1.85x [1.84, 1.88]", "12.98x [12.06, 13.20] ns": a factor with its interval, one piece
INTERVAL = re.compile(r"\d+(?:\.\d+)?x \[[^\]]*\](?: ns)?")
BORDER = 1  # a column's separator (box.SIMPLE_HEAD's, with collapsed padding)


def pieces(cell: str) -> list[str]:
    """The pieces of a cell that a line break must not split: its intervals and its words."""
    out, rest = [], cell
    for match in INTERVAL.finditer(cell):
        out.append(match.group())
        rest = rest.replace(match.group(), " ", 1)
    return out + rest.split()


def _widths(headers, rows) -> list[tuple[int, int]]:
    """(least, natural) width of each column."""
    out = []
    for i, header in enumerate(headers):
        cells = [row[i] for row in rows]
        least = max([len(p) for c in cells for p in pieces(c)] + [len(w) for w in header.split()]
                    + [1])
        natural = max([len(c) for c in cells] + [len(header), least])
        out.append((least, natural))
    return out


def _total(widths) -> int:
    return sum(widths) + BORDER * (len(widths) + 1)


def fit_widths(headers, rows, width: int) -> list[int] | None:
    """Column widths that fit `width`, or None when even the least widths do not. The widest
    columns give way first, the first column before any other."""
    ranges = _widths(headers, rows)
    widths = [natural for _, natural in ranges]
    if _total([least for least, _ in ranges]) > width:
        return None
    order = [0] + sorted(range(1, len(widths)), key=lambda i: -widths[i])
    while _total(widths) > width:
        shrinkable = [i for i in order if widths[i] > ranges[i][0]]
        first = shrinkable[0] if widths[0] > ranges[0][0] else max(shrinkable,
                                                                   key=lambda i: widths[i])
        widths[first] -= min(widths[first] - ranges[first][0], _total(widths) - width)
    return widths


def column_groups(headers, rows, width: int) -> list[list[int]]:
    """The columns of each table: all of them when they fit, else the first column with as
    many of the others, in order, as fit beside it."""
    if fit_widths(headers, rows, width) is not None:
        return [list(range(len(headers)))]
    least = [r[0] for r in _widths(headers, rows)]
    groups, current = [], [0]
    for i in range(1, len(headers)):
        if len(current) > 1 and _total([least[j] for j in current + [i]]) > width:
            groups.append(current)
            current = [0]
        current.append(i)
    return groups + [current]


def fitted(title: str, headers, rows, caption: str, width: int, dim) -> list[Table]:
    """rich Tables of the grid (title, headers, rows, caption) within `width` columns; `dim`
    says which cells to grey out."""
    tables = []
    groups = column_groups(headers, rows, width)
    for n, columns in enumerate(groups):
        sub_headers = [headers[i] for i in columns]
        sub_rows = [[row[i] for i in columns] for row in rows]
        widths = fit_widths(sub_headers, sub_rows, width) or [
            r[0] for r in _widths(sub_headers, sub_rows)]
        part = f" ({n + 1}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=title + part, caption=(caption or None) if n == len(groups) - 1
                      else None, caption_justify="left", box=box.SIMPLE_HEAD,
                      collapse_padding=True, pad_edge=False, padding=(0, 0))
        for i, (header, w) in enumerate(zip(sub_headers, widths)):
            table.add_column(header, justify="left" if i == 0 else "right", width=w)
        for row in sub_rows:
            table.add_row(*[Text(c, style="dim" if dim(c) else "") for c in row])
        tables.append(table)
    return tables
