"""The page: ``index.html`` from the sections, offline and escaped.

``Section`` is what the page shows of one section; ``TABLES`` gives the sections
that show a table under their caption, by key; ``render_html`` writes the page.
"""

from __future__ import annotations

import dataclasses
import html
import re


@dataclasses.dataclass
class Section:
    key: str
    title: str
    frames: dict                # csv stem -> DataFrame, each linked as <stem>.csv
    caption: str
    figures: list[str] = dataclasses.field(default_factory=list)   # stems of the PNG/SVG pairs
    table_html: str = ""        # shown under the caption


_POWER = re.compile(r"10\^([+\-−]?)(\d+(?:\.\d+)?)")


def powers(escaped):
    """Escaped text with every 10^x written as HTML writes it, 10<sup>x</sup> (a minus as −)."""
    return _POWER.sub(lambda m: f"10<sup>{'−' if m.group(1) in '-−' and m.group(1) else m.group(1)}"
                                f"{m.group(2)}</sup>", escaped)


def claims_table_html(table):
    """The claims grouped by lesson (``claims.grouped``), each group's verdict counts above
    its rows."""
    from harness.analysis import claims
    parts = []
    for group, counts, rows in claims.grouped(table):
        view = rows[[c for c in ("claim", "quote", "lesson", "verdict", "measured") if c in rows]]
        n = f"{len(rows)} claim{'' if len(rows) == 1 else 's'}"
        parts.append(f'<h3 id="claims-{html.escape(re.sub(r"[^a-z]+", "-", group))}">'
                     f"{html.escape(group[0].upper() + group[1:])}</h3>"
                     f'<p class="counts">{n}: {html.escape(claims.counts_line(counts))}.</p>'
                     + powers(view.to_html(index=False, escape=True, classes="table claims")))
    return "\n".join(parts)


def collapsed(title, table_html):
    """A long table behind a line the reader opens, not inline."""
    return f"<details><summary>{html.escape(title)}</summary>{table_html}</details>"


def depth_table_html(dt):
    """The depth analyser's frame as the lessons' Table 1: counts with thousands separators."""
    view = dt[["model", "T", "d", "macs", "flops", "span", "max_path", "parallelism"]].copy()
    return view.to_html(index=False, escape=True, float_format=lambda x: f"{x:,.1f}",
                        formatters={"macs": "{:,}".format, "flops": "{:,}".format},
                        classes="table depth")


def boxes_table_html(t):
    """Figure 1's boxes, in the figure's order, and whether each mixes positions."""
    view = t[["order", "box", "stack", "drawn", "mixes_positions", "mixing_inputs"]]
    return view.to_html(index=False, escape=True, na_rep="", classes="table boxes")


# section key -> the table it shows under its caption, from its frames as read back
TABLES = {"depth": lambda f: collapsed(f"the table: {len(f['depth'])} rows (depth.csv)",
                                       depth_table_html(f["depth"])),
          "transformer": lambda f: boxes_table_html(f["figure1_boxes"])}


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.95em;color:#333;margin-top:.4em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:left}.depth td{text-align:right}.depth td:first-child{text-align:left}
code{background:#f4f4f4;padding:1px 3px}
nav.toc{background:#fafafa;border:1px solid #eee;padding:.5em 1em}nav.toc ol{margin:.3em 0}
details summary{cursor:pointer;color:#245}h3{font-size:1.05em;margin-top:1.4em}
"""


def render_html(sections, meta, command):
    """The whole page: the sections in order, then ``meta`` (machine, versions) and ``command``."""
    esc = html.escape
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8>"
             f"<title>harness report</title><style>{_CSS}</style></head><body>",
             "<h1>What attention buys over recurrence, and what it costs</h1>",
             "<p>Every number below was measured on this machine by the command at the end "
             "of the page. Each figure links its data (CSV) and an SVG version; "
             '<a href="data.md">data.md</a> describes every column, with its unit.</p>']
    parts.append('<nav class="toc"><strong>Contents</strong><ol>'
                 + "".join(f'<li><a href="#{esc(s.key)}">{esc(s.title)}</a></li>' for s in sections)
                 + '<li><a href="#machine">Machine, versions and command</a></li></ol></nav>')
    for s in sections:
        parts.append(f'<section id="{esc(s.key)}"><h2>{esc(s.title)}</h2>')
        for stem in s.figures:
            parts.append(f'<figure><img src="{esc(stem)}.png" alt="{esc(s.title)}">'
                         f'</figure>')
        parts.append(f'<p class="caption" data-section="{esc(s.key)}">{powers(esc(s.caption))}</p>')
        links = " · ".join(f'<a href="{esc(n)}.csv">{esc(n)}.csv</a>' for n in s.frames)
        svgs = " · ".join(f'<a href="{esc(n)}.svg">{esc(n)}.svg</a>' for n in s.figures)
        parts.append(f"<p><small>data: {links}{' · figures: ' + svgs if svgs else ''}"
                     f"</small></p>")
        if s.table_html:
            parts.append(s.table_html)
        parts.append("</section>")
    parts.append('<h2 id="machine">Machine, versions and command</h2><table class=meta>')
    for k, val in meta.items():
        parts.append(f"<tr><th>{esc(str(k))}</th><td>{esc(str(val))}</td></tr>")
    parts.append(f"<tr><th>command</th><td><code>{esc(command)}</code></td></tr></table>")
    # a browser marks how many images failed to load (read by the headless-Chromium test)
    parts.append("<script>window.addEventListener('load',function(){var n=0;"
                 "for(var i of document.images){if(!i.complete||i.naturalWidth===0)n++;}"
                 "document.body.setAttribute('data-broken-images',String(n));});</script>")
    parts.append("</body></html>")
    return "\n".join(parts)

