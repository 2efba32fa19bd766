"""Server-rendered SVG charts: the geometry of bar and line charts over days.

No chart library reaches the browser: a view builds a `Chart` here and the template
`memories/_chart.html` draws it as an `<svg role="img">` with a <title> and <desc>, followed
by the numbers it shows as a table (in <details>), so a screen reader, a text browser and a
copy-paste all get the data. Colours come from CSS classes (`series-0` ...), so the charts
follow the light and dark themes.
"""

import datetime as dt
import math
from dataclasses import dataclass, field
from html import escape

from django.utils.safestring import SafeString, mark_safe

WIDTH = 640
HEIGHT = 220
SPARK_WIDTH = 240
SPARK_HEIGHT = 64
# Room for the y axis labels on the left and the day labels below.
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 8, 10, 26
# Distinct colours the stylesheet defines (series-0 .. series-7); more series reuse them.
PALETTE = 8


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    series: int
    label: str  # the segment's tooltip: "2026-11-20 · Messages: 1,204"


@dataclass
class Line:
    points: str
    series: int


@dataclass
class Chart:
    id: str
    title: str
    desc: str
    width: int
    height: int
    legend: list = field(default_factory=list)  # (series index, label)
    bars: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    y_ticks: list = field(default_factory=list)  # (y, label)
    x_ticks: list = field(default_factory=list)  # (x, label)
    head: list = field(default_factory=list)  # the table's column labels after "Day"
    rows: list = field(default_factory=list)  # (day label, [values]), newest day first
    total: int = 0
    limit: tuple | None = None  # (y, label) of a horizontal limit line (a budget)
    plot: tuple = (0, 0, 0, 0)  # left, top, right, bottom of the plot area

    @property
    def empty(self) -> bool:
        return self.total == 0

    def svg(self) -> SafeString:
        """The chart as an <svg role="img"> named by its <title> and <desc>.

        Built as one string rather than by template loops: a 90-day chart has hundreds of
        elements, and the template engine took ~70% of the page's time drawing them.
        """
        left, top, right, bottom = self.plot
        ident = escape(self.id)
        spark = " spark" if self.lines and not self.y_ticks else ""
        parts = [
            f'<svg class="chart-svg{spark}" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-labelledby="chart-{ident}-title chart-{ident}-desc" focusable="false">',
            f'<title id="chart-{ident}-title">{escape(self.title)}</title>',
            f'<desc id="chart-{ident}-desc">{escape(self.desc)}</desc>',
        ]
        for y, label in self.y_ticks:
            parts.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{y}" y2="{y}"></line>')
            parts.append(
                f'<text class="tick" x="{left - 6}" y="{y}" text-anchor="end" '
                f'dominant-baseline="middle">{escape(label)}</text>'
            )
        for x, label in self.x_ticks:
            parts.append(
                f'<text class="tick" x="{x}" y="{self.height - 8}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
        for bar in self.bars:
            parts.append(
                f'<rect class="series-{bar.series}" x="{bar.x}" y="{bar.y}" width="{bar.w}" '
                f'height="{bar.h}"><title>{escape(bar.label)}</title></rect>'
            )
        for line in self.lines:
            parts.append(f'<polyline class="line series-{line.series}" points="{line.points}"></polyline>')
        if self.limit:
            y, label = self.limit
            parts.append(
                f'<line class="limit" x1="{left}" x2="{right}" y1="{y}" y2="{y}">'
                f"<title>{escape(label)}</title></line>"
            )
        parts.append("</svg>")
        # Every text above is escaped; the rest are numbers.
        return mark_safe("".join(parts))

    def table_body(self) -> SafeString:
        """The <tbody> rows of the numbers behind the chart, newest day first."""
        return table_body(self.rows)


def table_body(rows) -> SafeString:
    """<tr>s of (row header, [numbers]) with the numbers grouped by thousands."""
    parts = []
    for head, values in rows:
        cells = "".join(f'<td class="num">{value:,}</td>' for value in values)
        parts.append(f'<tr><th scope="row">{escape(str(head))}</th>{cells}</tr>')
    # The headers are escaped, the values are integers.
    return mark_safe("".join(parts))


def nice_ceiling(value: float) -> tuple[float, float]:
    """(axis maximum, tick step): 4 or 5 steps of 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 0:
        return 1, 1
    raw = value / 4
    power = 10 ** math.floor(math.log10(raw))
    step = next(power * m for m in (1, 2, 2.5, 5, 10) if power * m >= raw)
    if step < 1:
        step = 1
    return step * math.ceil(value / step), step


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:,.0f}"


def _day_label(day: dt.date) -> str:
    return day.strftime("%b %-d")


def _x_ticks(days: list[dt.date], x_of) -> list:
    # About six labels whatever the range, always the last day.
    every = max(1, math.ceil(len(days) / 6))
    picked = list(range(len(days) - 1, -1, -every))
    return [(round(x_of(i), 1), _day_label(days[i])) for i in sorted(picked)]


def bar_chart(
    *, chart_id: str, title: str, desc: str, days: list[dt.date], series: list, limit: int | None = None
) -> Chart:
    """Stacked bars, one per day; `series` is [(label, [value per day])]; `limit` draws a
    horizontal line at that value (a daily budget)."""
    chart = Chart(chart_id, title, desc, WIDTH, HEIGHT)
    left, top, right, bottom = PAD_LEFT, PAD_TOP, WIDTH - PAD_RIGHT, HEIGHT - PAD_BOTTOM
    chart.plot = (left, top, right, bottom)
    chart.legend = [(i % PALETTE, label) for i, (label, _) in enumerate(series)]
    chart.head = [label for label, _ in series]
    sums = [sum(values[i] for _, values in series) for i in range(len(days))]
    chart.total = sum(sums)
    chart.rows = [(day.isoformat(), [values[i] for _, values in series]) for i, day in enumerate(days)][::-1]
    top_value, step = nice_ceiling(max([*sums, limit or 0]))
    scale = (bottom - top) / top_value
    if limit:
        chart.limit = (round(bottom - limit * scale, 1), f"Budget {_fmt(limit)}")
    slot = (right - left) / max(1, len(days))
    width = max(1.0, slot * 0.72)
    chart.y_ticks = [(round(bottom - v * scale, 1), _fmt(v)) for v in _frange(0, top_value, step)]
    chart.x_ticks = _x_ticks(days, lambda i: left + slot * (i + 0.5))
    for i, day in enumerate(days):
        base = bottom
        for s, (label, values) in enumerate(series):
            value = values[i]
            if not value:
                continue
            h = value * scale
            chart.bars.append(
                Bar(
                    x=round(left + slot * i + (slot - width) / 2, 2),
                    y=round(base - h, 2),
                    w=round(width, 2),
                    h=round(h, 2),
                    series=s % PALETTE,
                    label=f"{day.isoformat()} · {label}: {value:,}",
                )
            )
            base -= h
    return chart


def line_chart(
    *, chart_id: str, title: str, desc: str, days: list[dt.date], series: list, spark: bool = False
) -> Chart:
    """One line per series over the days; a `spark` chart is small and has no axes."""
    width, height = (SPARK_WIDTH, SPARK_HEIGHT) if spark else (WIDTH, HEIGHT)
    chart = Chart(chart_id, title, desc, width, height)
    if spark:
        left, top, right, bottom = 2, 4, width - 2, height - 4
    else:
        left, top, right, bottom = PAD_LEFT, PAD_TOP, width - PAD_RIGHT, height - PAD_BOTTOM
    chart.plot = (left, top, right, bottom)
    chart.legend = [(i % PALETTE, label) for i, (label, _) in enumerate(series)]
    chart.head = [label for label, _ in series]
    chart.rows = [(day.isoformat(), [values[i] for _, values in series]) for i, day in enumerate(days)][::-1]
    peak = max((max(values, default=0) for _, values in series), default=0)
    chart.total = peak
    top_value, step = nice_ceiling(peak)
    scale = (bottom - top) / top_value
    span = (right - left) / max(1, len(days) - 1)
    if not spark:
        chart.y_ticks = [(round(bottom - v * scale, 1), _fmt(v)) for v in _frange(0, top_value, step)]
        chart.x_ticks = _x_ticks(days, lambda i: left + span * i)
    for s, (_, values) in enumerate(series):
        points = " ".join(
            f"{round(left + span * i, 1)},{round(bottom - value * scale, 1)}"
            for i, value in enumerate(values)
        )
        chart.lines.append(Line(points=points, series=s % PALETTE))
    return chart


def _frange(start: float, stop: float, step: float) -> list[float]:
    count = round((stop - start) / step)
    return [start + step * i for i in range(count + 1)]
