"""Inline SVG charts built from series that were computed upstream (``report.views``).

Pure functions returning markup: horizontal bars against a peak, log-x line charts, a log-log
roofline, and stacked bars against a capacity. No JavaScript and nothing fetched: the page must
work on an offline GPU node. Each chart is a ``<figure class="chart" data-chart=KIND>`` whose
series carry ``data-series`` attributes, which the browser test uses to check every series drew.
Mapping values to pixels and choosing ticks is all that happens here.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Iterable, Sequence

from perfstack.report.inert import html_text as escape
from perfstack.report.numbers import num
from perfstack.units import size_tick

W, H = 720, 300
PAD_L, PAD_R, PAD_T, PAD_B = 64, 24, 16, 44
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7a7a00", "#6a3d9a", "#999999",
           "#1b9e77")
SEVERITY_COLOR = {"good": "#2e8540", "below expected": "#c98a00", "low": "#c0392b", "no reference": "#7f8c8d"}


# -- scales -----------------------------------------------------------------------------------
# Charts draw numbers read from Runs, which only promise to be finite: 1e308 is, but a margin of 15%
# above it, or the span from -1e308 to 1e308, is not. Axis bounds are held within +-AXIS_MAX (and log
# axes above 1/AXIS_MAX), so that ticks can always be computed; a value beyond is drawn at the edge.
AXIS_MAX = 1e300


def _bounded(v: float, floor: float = -AXIS_MAX) -> float:
    return min(max(v, floor), AXIS_MAX) if v == v else floor  # NaN (v != v) to the floor


class Scale:
    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool) -> None:
        self.floor = 1 / AXIS_MAX if log else -AXIS_MAX
        lo, hi = _bounded(lo, self.floor), _bounded(hi, self.floor)
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            hi = lo + 1
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def __call__(self, v: float) -> float:
        v = _bounded(v, self.floor)
        x = math.log10(v) if self.log else v
        return self.p0 + (x - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round linear ticks covering [lo, hi]."""
    lo, hi = _bounded(lo), _bounded(hi)
    span = hi - lo or abs(hi) or 1.0
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    count = max(1, math.ceil((hi - start) / step - 1e-9))
    return [round(start + i * step, 12) for i in range(count + 1)]


def log10_ticks(lo: float, hi: float) -> list[float]:
    lo, hi = _bounded(lo, 1 / AXIS_MAX), _bounded(hi, 1 / AXIS_MAX)
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0**e for e in range(a, b + 1)]


def pow2_ticks(lo: float, hi: float, max_ticks: int = 9) -> list[float]:
    lo, hi = _bounded(lo, 1 / AXIS_MAX), _bounded(hi, 1 / AXIS_MAX)
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = next(s for s in (1, 2, 3, 4, 5, 10, 20) if (b - a) / s <= max_ticks)
    a = a - a % step
    return [2.0**e for e in range(a, b + 1, step)]


def _attr(**kw: object) -> str:
    return " ".join(f'{k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in kw.items() if v is not None)


def _svg(kind: str, body: list[str], title: str, height: int = H, legend: Sequence[tuple[str, str, str]] = ()) -> str:
    legend_html = ""
    if legend:
        items = "".join(f'<span class="key"><i class="sw {escape(style)}" '
                        f'style="background:{escape(color)};border-color:{escape(color)}"></i>'
                        f"{escape(name)}</span>" for name, color, style in legend)
        legend_html = f'<figcaption class="legend">{items}</figcaption>'
    return (f'<figure class="chart" data-chart="{escape(kind)}">'
            f'<svg viewBox="0 0 {W} {height}" role="img" aria-label="{escape(title)}" '
            f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>{legend_html}</figure>")


def _axes(xs: Scale, ys: Scale, xticks: Iterable[float], yticks: Iterable[float], xfmt: Callable[[float], str],
          yfmt: Callable[[float], str], x_label: str, y_label: str, height: int) -> list[str]:
    out = []
    bottom = height - PAD_B
    for t in yticks:
        y = ys(t)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(yfmt(t))}</text>')
    for t in xticks:
        x = xs(t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{bottom}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(xfmt(t))}</text>')
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{W - PAD_R}" y1="{bottom}" y2="{bottom}"/>')
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{PAD_L}" y1="{PAD_T}" y2="{bottom}"/>')
    out.append(f'<text class="label" x="{(PAD_L + W - PAD_R) / 2:.0f}" y="{height - 6}" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text class="label" transform="translate(14 {(PAD_T + bottom) / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    return out


def _log_fmt(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"1e{math.log10(v):.0f}"


# -- charts -----------------------------------------------------------------------------------
def fraction_bars(rows: Sequence[dict[str, Any]], title: str, kind: str = "peak-bars") -> str:
    """Horizontal bars of a fraction of peak (0..1+), with the practical ceiling as a tick.

    Each row: label, fraction, expected (or None), text (shown right of the bar), verdict.
    """
    row_h, label_w = 26, 230
    height = PAD_T + row_h * len(rows) + 34
    top = max([1.0] + [r["fraction"] for r in rows if r.get("fraction") is not None])
    xs = Scale(0, top, label_w, W - 190, False)
    body = []
    ticks = [i * 0.25 for i in range(int(top / 0.25 + 1e-9) + 1)] if top <= 2 else nice_ticks(0, top)
    for t in ticks:
        x = xs(t)
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" y2="{height - 30}"/>')
        body.append(f'<text class="tick" x="{x:.1f}" y="{height - 14}" text-anchor="middle">{t:.0%}</text>')
    for i, r in enumerate(rows):
        y = PAD_T + i * row_h
        f = r.get("fraction") or 0.0
        color = SEVERITY_COLOR.get(r.get("verdict", ""), PALETTE[0])
        tip = f'{r["label"]}: {r.get("text", "")}'
        body.append(f'<g data-series="{escape(r["label"])}"><title>{escape(tip)}</title>'
                    f'<text class="rowlabel" x="{label_w - 8}" y="{y + 16}" text-anchor="end">'
                    f'{escape(_clip(r["label"], 34))}</text>'
                    f'<rect class="bar" x="{label_w}" y="{y + 4}" width="{max(xs(f) - label_w, 1):.1f}" '
                    f'height="{row_h - 9}" fill="{color}"/>')
        if r.get("expected"):
            x = xs(r["expected"])
            body.append(f'<line class="expected" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1}" y2="{y + row_h - 2}"/>')
        end = max(xs(f), xs(r["expected"]) if r.get("expected") else 0.0)  # clear of the ceiling tick
        body.append(f'<text class="value" x="{end + 6:.1f}" y="{y + 16}">{escape(r.get("text", ""))}</text></g>')
    legend = [("good", SEVERITY_COLOR["good"], ""), ("below expected", SEVERITY_COLOR["below expected"], ""),
              ("low", SEVERITY_COLOR["low"], ""), ("typical practical ceiling", "#222", "tick")]
    return _svg(kind, body, title, height, legend)


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], title: str, x_label: str, y_label: str,
               hlines: Sequence[tuple[str, float]] = (), x_bytes: bool = True, kind: str = "curve") -> str:
    """Log-x line chart (message or transfer size) of one or more series, with dashed reference lines."""
    pts = [p for _, ps in series for p in ps if p[0] > 0]
    if not pts:
        return ""
    x_lo, x_hi = min(p[0] for p in pts), max(p[0] for p in pts)
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    y_hi = max([p[1] for p in pts] + [v for _, v in hlines]) * 1.08 or 1.0
    yt = nice_ticks(0, y_hi)
    xs = Scale(x_lo, x_hi, PAD_L, W - PAD_R, True)
    ys = Scale(0, yt[-1], H - PAD_B, PAD_T, False)
    xt = pow2_ticks(x_lo, x_hi) if x_bytes else log10_ticks(x_lo, x_hi)
    xt = [t for t in xt if x_lo <= t <= x_hi] or [x_lo, x_hi]
    body = _axes(xs, ys, xt, yt, size_tick if x_bytes else _log_fmt, lambda v: f"{v:g}", x_label, y_label, H)
    legend = []
    for label, v in hlines:
        y = ys(v)
        body.append(f'<g data-ref="{escape(label)}"><line class="ref" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" '
                    f'y2="{y:.1f}"/><text class="reflabel" x="{W - PAD_R - 4}" y="{y - 4:.1f}" text-anchor="end">'
                    f"{escape(label)} {num(v)}</text></g>")
    for i, (name, ps) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        ps = sorted(p for p in ps if p[0] > 0)
        d = " ".join(f"{'M' if j == 0 else 'L'}{xs(x):.1f},{ys(y):.1f}" for j, (x, y) in enumerate(ps))
        dots = "".join(f'<circle cx="{xs(x):.1f}" cy="{ys(y):.1f}" r="2.6" fill="{color}">'
                       f"<title>{escape(name)} {escape(size_tick(x) if x_bytes else num(x))}: {num(y)}</title>"
                       f"</circle>" for x, y in ps)
        body.append(f'<g data-series="{escape(name)}"><path class="line" d="{d}" stroke="{color}"/>{dots}</g>')
        legend.append((name, color, ""))
    return _svg(kind, body, title, H, legend)


def roofline_chart(ceilings: Sequence[tuple[str, float]], slopes: Sequence[tuple[str, float, bool]],
                   points: Sequence[tuple[str, float, float, str]], title: str) -> str:
    """Log-log roofline: attainable TFLOP/s = min(peak, intensity x bandwidth).

    ceilings: (label, TFLOP/s); slopes: (label, TB/s, measured?); points: (label, FLOP/byte, TFLOP/s, group).
    """
    peaks = [c for _, c in ceilings]
    bws = [b for _, b, _ in slopes]
    if not points and not (peaks and bws):
        return ""
    x_lo, x_hi, y_lo, y_hi = _roofline_bounds(peaks, bws, points)
    xs = Scale(x_lo, x_hi, PAD_L, W - PAD_R, True)
    ys = Scale(y_lo, y_hi, H - PAD_B, PAD_T, True)
    body = _axes(xs, ys, [t for t in log10_ticks(x_lo, x_hi) if x_lo <= t <= x_hi],
                 [t for t in log10_ticks(y_lo, y_hi) if y_lo <= t <= y_hi], _log_fmt, _log_fmt,
                 "arithmetic intensity (FLOP/byte)", "TFLOP/s", H)
    clip = f"roof{zlib.crc32(title.encode()):08x}"
    body.append(f'<clipPath id="{clip}"><rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
                f'height="{H - PAD_T - PAD_B}"/></clipPath>')
    legend: list[tuple[str, str, str]] = []
    token_color = _roofline_ceilings(ceilings, max(bws) if bws else None, x_lo, xs, ys, clip, body, legend)
    _roofline_slopes(slopes, peaks, (x_lo, x_hi, y_lo), xs, ys, clip, body, legend)
    _roofline_points(points, token_color, xs, ys, body, legend)
    return _svg("roofline", body, title, H, legend)


def _roofline_bounds(peaks: list[float], bws: list[float],
                     points: Sequence[tuple[str, float, float, str]]) -> tuple[float, float, float, float]:
    """(x_lo, x_hi, y_lo, y_hi) of log axes that hold every point, ceiling and ridge, with room around them."""
    ridges = [p / b for p in peaks for b in bws if b > 0]
    xs_all = [p[1] for p in points if p[1] > 0] + ridges
    ys_all = [p[2] for p in points if p[2] > 0] + peaks
    x_lo = min([1.0] + [x / 3 for x in xs_all])
    x_hi = max([x * 3 for x in xs_all] + [10.0])
    y_hi = max(ys_all) * 2.5
    y_lo = min([y / 3 for y in ys_all] + [x_lo * min(bws) if bws else y_hi / 1e3])
    return x_lo, x_hi, max(y_lo, y_hi / 1e5), y_hi


def _roofline_ceilings(ceilings: Sequence[tuple[str, float]], top_bw: float | None, x_lo: float, xs: Scale,
                       ys: Scale, clip: str, body: list[str], legend: list[tuple[str, str, str]]) -> dict[str, str]:
    """The compute roofs, lowest first; returns the colour of each dtype token ('bf16') for the points."""
    token_color: dict[str, str] = {}
    for i, (label, peak) in enumerate(sorted(ceilings, key=lambda c: c[1])):
        color = PALETTE[i % len(PALETTE)]
        token_color.update({t: color for t in label.split("/")})
        x0 = max(peak / top_bw if top_bw else x_lo, x_lo)
        y = ys(peak)
        # the label sits in the empty top-left triangle, joined to its roof by a dotted guide
        body.append(f'<g data-series="ceiling {escape(label)}" clip-path="url(#{clip})"><line class="ceiling" '
                    f'x1="{xs(x0):.1f}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}"/>'
                    f'<line class="guide" x1="{PAD_L}" x2="{xs(x0):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}"/>'
                    f'<text class="reflabel" x="{PAD_L + 6}" y="{y - 4:.1f}" style="fill:{color}">'
                    f"{escape(label)} {num(peak)}</text></g>")
        legend.append((f"{label} peak", color, "dash solid"))
    return token_color


def _roofline_slopes(slopes: Sequence[tuple[str, float, bool]], peaks: list[float],
                     bounds: tuple[float, float, float], xs: Scale, ys: Scale, clip: str,
                     body: list[str], legend: list[tuple[str, str, str]]) -> None:
    x_lo, x_hi, y_lo = bounds
    for label, bw, measured in slopes:
        # the bandwidth roof: y = x * bw, drawn up to where it meets the highest ceiling
        x_end = min((max(peaks) / bw) if peaks else x_hi, x_hi)
        x_start = max(x_lo, y_lo / bw)
        cls = "slope measured" if measured else "slope"
        body.append(f'<g data-series="{escape(label)}" clip-path="url(#{clip})"><line class="{cls}" '
                    f'x1="{xs(x_start):.1f}" y1="{ys(x_start * bw):.1f}" x2="{xs(x_end):.1f}" '
                    f'y2="{ys(x_end * bw):.1f}"/></g>')
        legend.append((label, "currentColor", "dash" if measured else "dash solid"))


def _roofline_points(points: Sequence[tuple[str, float, float, str]], token_color: dict[str, str], xs: Scale,
                     ys: Scale, body: list[str], legend: list[tuple[str, str, str]]) -> None:
    """Measured GEMMs as circles in their dtype's colour; the workload's kernels as diamonds."""
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for label, x, y, group in points:
        if x > 0 and y > 0:
            groups.setdefault(group, []).append((label, x, y))
    for gi, (group, ps) in enumerate(groups.items()):
        token = group.split()[-1] if group.split() else group
        measured = group.lower().startswith("gemm")
        color = ((token_color.get(token) if measured else None)
                 or ("currentColor" if not measured else PALETTE[(gi + 5) % len(PALETTE)]))
        shape = "circle" if measured else "diamond"
        marks = "".join(_marker(shape, xs(x), ys(y), color, f"{label}: {num(y)} TFLOP/s at {num(x)} FLOP/B")
                        for label, x, y in ps)
        body.append(f'<g data-series="{escape(group)}">{marks}</g>')
        legend.append((group, color, "" if measured else "diamond"))


def _marker(shape: str, x: float, y: float, color: str, tip: str) -> str:
    t = f"<title>{escape(tip)}</title>"
    if shape == "square":
        return f'<rect class="pt" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{color}">{t}</rect>'
    if shape == "diamond":
        return (f'<polygon class="pt" points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y:.1f} {x:.1f},{y + 5:.1f} '
                f'{x - 5:.1f},{y:.1f}" fill="{color}">{t}</polygon>')
    return f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{color}">{t}</circle>'


def stacked_bars(rows: Sequence[tuple[str, Sequence[tuple[str, float]]]], title: str, unit: str,
                 refs: Sequence[tuple[str, float]] = (), kind: str = "stacked") -> str:
    """Horizontal stacked bars (one per row), segments colored by name, with dashed reference lines
    (a capacity, a total)."""
    if not rows:
        return ""
    names: list[str] = []
    for _, segs in rows:
        names += [n for n, _ in segs if n not in names]
    color = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    row_h, label_w = 28, 130
    top_pad = 14 * len(refs)
    height = PAD_T + top_pad + row_h * len(rows) + 40
    total = max(sum(v for _, v in segs) for _, segs in rows)
    top = max([total] + [v for _, v in refs]) * 1.05 or 1.0
    ticks = nice_ticks(0, top)
    xs = Scale(0, ticks[-1], label_w, W - PAD_R - 10, False)
    body = []
    for t in ticks:
        x = xs(t)
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" y2="{height - 36}"/>'
                    f'<text class="tick" x="{x:.1f}" y="{height - 22}" text-anchor="middle">{t:g}</text>')
    body.append(f'<text class="label" x="{(label_w + W) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
                f"{escape(unit)}</text>")
    for i, (label, segs) in enumerate(rows):
        y = PAD_T + top_pad + i * row_h
        body.append(f'<text class="rowlabel" x="{label_w - 8}" y="{y + 17}" text-anchor="end">'
                    f"{escape(_clip(label, 18))}</text>")
        x0 = 0.0
        for name, v in segs:
            if v <= 0:
                continue
            body.append(f'<rect class="seg" data-series="{escape(name)}" x="{xs(x0):.1f}" y="{y + 4}" '
                        f'width="{max(xs(x0 + v) - xs(x0), 0.8):.1f}" height="{row_h - 9}" fill="{color[name]}">'
                        f"<title>{escape(label)} · {escape(name)}: {num(v, unit)}</title></rect>")
            x0 += v
    for j, (label, v) in enumerate(refs):
        x = xs(v)
        body.append(f'<g data-ref="{escape(label)}"><line class="ref" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T + j * 14}" '
                    f'y2="{height - 36}"/><text class="reflabel" x="{x - 4:.1f}" y="{PAD_T + j * 14 + 6}" '
                    f'text-anchor="end">{escape(label)} {num(v, unit)}</text></g>')
    return _svg(kind, body, title, height, [(n, color[n], "") for n in names])


def value_bars(rows: Sequence[tuple[str, float, str]], title: str, unit: str, kind: str = "value-bars",
               highlight: str | None = None) -> str:
    """Plain horizontal bars of values (recoverable ms, latency bounds); ``highlight`` names the one to stress."""
    if not rows:
        return ""
    row_h, label_w = 26, 230
    height = PAD_T + row_h * len(rows) + 40
    ticks = nice_ticks(0, max(v for _, v, _ in rows) * 1.15 or 1.0)
    xs = Scale(0, ticks[-1], label_w, W - 170, False)
    body = []
    for t in ticks:
        x = xs(t)
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" y2="{height - 36}"/>'
                    f'<text class="tick" x="{x:.1f}" y="{height - 22}" text-anchor="middle">{t:g}</text>')
    body.append(f'<text class="label" x="{(label_w + W) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
                f"{escape(unit)}</text>")
    for i, (label, v, text) in enumerate(rows):
        y = PAD_T + i * row_h
        color = PALETTE[5] if label == highlight else PALETTE[0]
        body.append(f'<g data-series="{escape(label)}"><title>{escape(label)}: {escape(text)}</title>'
                    f'<text class="rowlabel" x="{label_w - 8}" y="{y + 16}" text-anchor="end">'
                    f'{escape(_clip(label, 34))}</text><rect class="bar" x="{label_w}" y="{y + 4}" '
                    f'width="{max(xs(v) - label_w, 1):.1f}" height="{row_h - 9}" fill="{color}"/>'
                    f'<text class="value" x="{xs(v) + 6:.1f}" y="{y + 16}">{escape(text)}</text></g>')
    return _svg(kind, body, title, height)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def delta_chart(rows: Sequence[tuple[str, float, float | None, float | None, str]], title: str) -> str:
    """Change of each figure in % with its interval as a whisker, colored by verdict
    (rows: label, change %, interval low %, interval high %, verdict)."""
    if not rows:
        return ""
    row_h, label_w = 22, 230
    height = PAD_T + row_h * len(rows) + 40
    vals = [v for r in rows for v in (r[1], r[2], r[3]) if v is not None]
    span = max(1.0, max(abs(v) for v in vals) * 1.15)
    ticks = nice_ticks(-span, span, 6)
    xs = Scale(ticks[0], ticks[-1], label_w, W - PAD_R - 10, False)
    colors = {"improved": SEVERITY_COLOR["good"], "regressed": SEVERITY_COLOR["low"]}
    body = []
    for t in ticks:
        x = xs(t)
        body.append(f'<line class="{"axis" if t == 0 else "grid"}" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" '
                    f'y2="{height - 36}"/><text class="tick" x="{x:.1f}" y="{height - 22}" text-anchor="middle">'
                    f"{t:+g}%</text>")
    body.append(f'<text class="label" x="{(label_w + W) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
                "change of the figure (%), with its 95% interval</text>")
    for i, (label, v, lo, hi, verdict) in enumerate(rows):
        y = PAD_T + i * row_h + row_h / 2
        color = colors.get(verdict, "#8a8a8a")
        whisker = (f'<line class="whisker" x1="{xs(lo):.1f}" x2="{xs(hi):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{color}" stroke-width="2"/>' if lo is not None and hi is not None else "")
        body.append(f'<g data-series="{escape(label)}"><title>{escape(label)}: {v:+.2f}% ({escape(verdict)})</title>'
                    f'<text class="rowlabel" x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end">'
                    f"{escape(_clip(label, 34))}</text>{whisker}"
                    f'<circle class="pt" cx="{xs(v):.1f}" cy="{y:.1f}" r="4" fill="{color}"/></g>')
    legend = [("improved", colors["improved"], ""), ("regressed", colors["regressed"], ""),
              ("within noise", "#8a8a8a", "")]
    return _svg("deltas", body, title, height, legend)


def xy_chart(series: Sequence[tuple[str, Sequence[tuple[float, float, str]], bool]], title: str, x_label: str,
             y_label: str, hlines: Sequence[tuple[str, float]] = (), vlines: Sequence[tuple[str, float]] = (),
             kind: str = "xy", label_points: bool = False) -> str:
    """Linear x-y chart from zero: each series (name, [(x, y, point label)], dashed) joined in the order
    given, which need not be x's (latency against throughput folds back past saturation); dashed
    horizontal reference lines (an objective) and vertical markers (a knee). ``label_points`` writes each
    point label of the first series beside its point (a load level), not only in its tooltip."""
    pts = [(x, y) for _, ps, _ in series for x, y, _ in ps if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return ""
    xt = nice_ticks(0, max([x for x, _ in pts] + [v for _, v in vlines]) * 1.05 or 1.0)
    yt = nice_ticks(0, max([y for _, y in pts] + [v for _, v in hlines]) * 1.08 or 1.0)
    xs = Scale(0, xt[-1], PAD_L, W - PAD_R, False)
    ys = Scale(0, yt[-1], H - PAD_B, PAD_T, False)
    body = _axes(xs, ys, xt, yt, lambda v: f"{v:g}", lambda v: f"{v:g}", x_label, y_label, H)
    for label, v in hlines:
        y = ys(v)
        body.append(f'<g data-ref="{escape(label)}"><line class="ref" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" '
                    f'y2="{y:.1f}"/><text class="reflabel" x="{W - PAD_R - 4}" y="{y - 4:.1f}" text-anchor="end">'
                    f"{escape(label)}</text></g>")
    for j, (label, v) in enumerate(vlines):
        x = xs(v)
        body.append(f'<g data-mark="{escape(label)}"><line class="ref" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" '
                    f'y2="{H - PAD_B}"/><text class="reflabel" x="{x - 4:.1f}" y="{PAD_T + 10 + 12 * j}" '
                    f'text-anchor="end">{escape(label)}</text></g>')
    legend = []
    for i, (name, ps, dashed) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        ps = [p for p in ps if math.isfinite(p[0]) and math.isfinite(p[1])]
        d = " ".join(f"{'M' if j == 0 else 'L'}{xs(x):.1f},{ys(y):.1f}" for j, (x, y, _) in enumerate(ps))
        dash = ' stroke-dasharray="6 3"' if dashed else ""
        dots = "".join(_marker("circle", xs(x), ys(y), color, f"{name} at {tip}: {num(y)}") for x, y, tip in ps)
        if label_points and i == 0:
            dots += "".join(f'<text class="reflabel" x="{xs(x) + 5:.1f}" y="{ys(y) - 6:.1f}">{escape(tip)}</text>'
                            for x, y, tip in ps)
        body.append(f'<g data-series="{escape(name)}"><path class="line" d="{d}" stroke="{color}"{dash}/>{dots}</g>')
        legend.append((name, color, "dash" if dashed else ""))
    return _svg(kind, body, title, H, legend)


def strips(rows: Sequence[tuple[str, Sequence[float], float | None]], title: str, unit: str,
           kind: str = "strips") -> str:
    """Each row's samples as a strip of dots on one shared axis (every timed step of every run of an arm),
    with a bar at the row's figure (the best run's median): how wide each arm's step times spread."""
    rows = [r for r in rows if r[1]]
    if not rows:
        return ""
    row_h, label_w = 28, 170
    height = PAD_T + row_h * len(rows) + 40
    lo = min(min(s) for _, s, _ in rows)
    hi = max(max(s) for _, s, _ in rows)
    ticks = nice_ticks(lo * 0.95, hi * 1.05 or 1.0)
    xs = Scale(ticks[0], ticks[-1], label_w, W - 30, False)
    body = []
    for t in ticks:
        x = xs(t)
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" y2="{height - 36}"/>'
                    f'<text class="tick" x="{x:.1f}" y="{height - 22}" text-anchor="middle">{t:g}</text>')
    body.append(f'<text class="label" x="{(label_w + W) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
                f"{escape(unit)}</text>")
    for i, (label, samples, mark) in enumerate(rows):
        y = PAD_T + i * row_h + row_h / 2
        color = PALETTE[i % len(PALETTE)]
        dots = "".join(f'<circle cx="{xs(v):.1f}" cy="{y + (j % 5 - 2) * 2:.1f}" r="2" fill="{color}" '
                       f'fill-opacity="0.55"/>' for j, v in enumerate(samples))
        best = (f'<line x1="{xs(mark):.1f}" x2="{xs(mark):.1f}" y1="{y - 10:.1f}" y2="{y + 10:.1f}" '
                f'stroke="#222" stroke-width="2"/>' if mark is not None else "")
        body.append(f'<g data-series="{escape(label)}"><title>{escape(label)}: {len(samples)} steps</title>'
                    f'<text class="rowlabel" x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end">'
                    f'{escape(_clip(label, 24))}</text>{dots}{best}</g>')
    return _svg(kind, body, title, height)
