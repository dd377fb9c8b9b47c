"""harness.report.html: the page and its tables, escaped, linked and given their classes."""

from __future__ import annotations

import re

import pandas as pd

from harness.models import RECURRENCE
from harness.report import html


def test_render_html_escapes_and_links_every_file():
    from harness.report import html as report_html
    sec = report_html.Section("k<1>", "T & d", {"a&b": None, "c": None}, "x < y & 'z'",
                              ["fig<1>", "g"], "<table>T1</table>")
    plain = report_html.Section("n", "No figure", {"d": None}, "cap")
    page = report_html.render_html([sec, plain], {"cpu<": "x86 & co", "n": 3},
                                   "harness report --out <o>")
    assert '<section id="k&lt;1&gt;"><h2>T &amp; d</h2>' in page
    assert '<img src="fig&lt;1&gt;.png" alt="T &amp; d">' in page and '<img src="g.png"' in page
    assert '<p class="caption" data-section="k&lt;1&gt;">x &lt; y &amp; &#x27;z&#x27;</p>' in page
    assert '<a href="a&amp;b.csv">a&amp;b.csv</a> · <a href="c.csv">c.csv</a>' in page
    assert '<a href="fig&lt;1&gt;.svg">fig&lt;1&gt;.svg</a> · <a href="g.svg">g.svg</a>' in page
    assert "<table>T1</table>" in page
    body = page.split('<section id="n">')[1].split("</section>")[0]
    assert "<img" not in body and "figures:" not in body and '<a href="d.csv">d.csv</a>' in body
    assert "<tr><th>cpu&lt;</th><td>x86 &amp; co</td></tr>" in page and "<tr><th>n</th><td>3</td></tr>" in page
    assert "<code>harness report --out &lt;o&gt;</code>" in page
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert page.count("<section") == page.count("</section>") == 2


def test_table1_formats_counts_with_separators():
    from harness.report import html as report_html
    dt = pd.DataFrame([dict(model=RECURRENCE, T=1000, d=512, macs=524288000, flops=1048576000,
                            span=3000, max_path=3000, parallelism=1234.56, ops=1, scalar_work=2)])
    html = report_html.depth_table_html(dt.assign(model="<b>rnn</b>"))
    for cell in ("524,288,000", "1,048,576,000", "1,234.6", "&lt;b&gt;rnn&lt;/b&gt;"):
        assert f"<td>{cell}</td>" in html
    heads = re.findall(r"<th>(.*?)</th>", html)
    assert heads == ["model", "T", "d", "macs", "flops", "span", "max_path", "parallelism"]
    claims = report_html.claims_table_html(pd.DataFrame({"claim": ["a < b"], "lesson": ["self-attention"],
                                                         "measured": ["m"], "verdict": ["holds"],
                                                         "value": [1.0]}))
    assert re.findall(r"<th>(.*?)</th>", claims) == ["claim", "lesson", "verdict", "measured"]
    assert "<td>a &lt; b</td>" in claims
    # the lesson's own words, when the table has them, beside the claim
    quoted = report_html.claims_table_html(pd.DataFrame({"lesson": ["self-attention"], "quote": ["«x»"],
                                                         "claim": ["c"], "verdict": ["holds"]}))
    assert re.findall(r"<th>(.*?)</th>", quoted) == ["claim", "quote", "lesson", "verdict"]
    assert "<td>«x»</td>" in quoted


def test_render_html_frames_the_page_and_counts_broken_images():
    from harness.report import html as report_html
    sec = report_html.Section("s", "S", {"a": None}, "cap", ["f"])
    page = report_html.render_html([sec], {}, "cmd")
    assert "\n<h1>What attention buys over recurrence, and what it costs</h1>\n" in page
    assert ("<p>Every number below was measured on this machine by the command at the end of the "
            "page. Each figure links its data (CSV) and an SVG version; "
            '<a href="data.md">data.md</a> describes every column, with its unit.</p>') in page
    assert '<p><small>data: <a href="a.csv">a.csv</a> · figures: <a href="f.svg">f.svg</a></small></p>' in page
    assert '\n</section>\n<h2 id="machine">Machine, versions and command</h2><table class=meta>\n' in page
    assert ("<script>window.addEventListener('load',function(){var n=0;"
            "for(var i of document.images){if(!i.complete||i.naturalWidth===0)n++;}"
            "document.body.setAttribute('data-broken-images',String(n));});</script>") in page
    no_fig = report_html.render_html([report_html.Section("s", "S", {"a": None}, "cap")], {}, "cmd")
    assert '<p><small>data: <a href="a.csv">a.csv</a></small></p>' in no_fig


def test_report_tables_carry_their_css_classes_and_no_index():
    from harness.report import html as report_html
    claims = report_html.claims_table_html(pd.DataFrame({"claim": ["c"], "lesson": ["self-attention"],
                                                         "verdict": ["holds"], "measured": ["m"]}))
    assert '<table border="1" class="dataframe table claims">' in claims
    assert re.findall(r"<th>(.*?)</th>", claims) == ["claim", "lesson", "verdict", "measured"]
    dt = pd.DataFrame([dict(model="m", T=1, d=2, macs=3, flops=6, span=4, max_path=5,
                            parallelism=1.5)])
    t1 = report_html.depth_table_html(dt)
    assert '<table border="1" class="dataframe table depth">' in t1
    assert re.findall(r"<th>(.*?)</th>", t1)[0] == "model"


def test_figure1s_boxes_table_keeps_its_columns_in_order_with_blank_missing_cells():
    t = pd.DataFrame({"note": ["left out"] * 2, "order": [1, 2], "box": ["a <b>", "c"],
                      "stack": ["encoder", "decoder"], "drawn": [True, False],
                      "mixes_positions": [True, False], "mixing_inputs": ["Q, K", None]})
    page = html.boxes_table_html(t)
    assert '<table border="1" class="dataframe table boxes">' in page
    assert re.findall(r"<th>(.*?)</th>", page) == ["order", "box", "stack", "drawn",
                                                    "mixes_positions", "mixing_inputs"]
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in page.split("<tbody>")[1].split("<tr>")[1:]]
    assert rows == [["1", "a &lt;b&gt;", "encoder", "True", "True", "Q, K"],
                    ["2", "c", "decoder", "False", "False", ""]]
    assert html.TABLES["transformer"]({"figure1_boxes": t}) == page


def test_powers_of_ten_are_written_as_html_superscripts():
    from harness.report.html import powers
    assert powers("cut from 10^+9.3 to 10^-45.8, 10^3 and 10^−2") == (
        "cut from 10<sup>+9.3</sup> to 10<sup>−45.8</sup>, 10<sup>3</sup> and 10<sup>−2</sup>")
    assert powers("no power: 10 ^ 3, x^2") == "no power: 10 ^ 3, x^2"
    page = html.render_html([html.Section("s", "t", {}, "at 10^-4.5 of near")], {}, "cmd")
    assert "at 10<sup>−4.5</sup> of near" in page and "10^" not in page


def test_text_columns_read_left_and_the_depth_tables_numbers_right():
    css = html._CSS.replace("\n", "")
    assert "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}" in css
    assert ".depth td{text-align:right}.depth td:first-child{text-align:left}" in css


def test_the_page_opens_with_a_table_of_contents_linking_every_section():
    secs = [html.Section("a", "First & one", {}, "x"), html.Section("b", "Second", {}, "y")]
    page = html.render_html(secs, {}, "cmd")
    toc = page.split('<nav class="toc">', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'<a href="#([^"]+)">(.*?)</a>', toc) == [
        ("a", "First &amp; one"), ("b", "Second"), ("machine", "Machine, versions and command")]
    assert page.index('<nav class="toc">') < page.index('<section id="a">')
    assert '<h2 id="machine">' in page


def test_the_claims_are_grouped_by_lesson_with_their_verdict_counts_above_them():
    t = pd.DataFrame({"claim": ["s1", "a1", "s2", "t1"], "verdict": ["holds", "does not hold",
                                                                    "holds", "holds"],
                      "lesson": ["self-attention", "additive attention", "self-attention",
                                 "goodbye to recurrence, asked of today's models"]})
    page = html.claims_table_html(t)
    heads = re.findall(r'<h3 id="claims-([a-z-]+)">(.*?)</h3><p class="counts">(.*?)</p>', page)
    assert heads == [("additive-attention", "Additive attention", "1 claim: 1 does not hold."),
                     ("self-attention", "Self-attention", "2 claims: 2 hold."),
                     ("today-s-models", "Today&#x27;s models", "1 claim: 1 holds.")]
    tables = page.split("<h3")[1:]
    assert "<td>s1</td>" in tables[1] and "<td>s2</td>" in tables[1] and "s1" not in tables[0]


def test_the_depth_table_is_collapsed_behind_its_row_count():
    dt = pd.DataFrame([dict(model="m", T=T, d=2, macs=3, flops=6, span=4, max_path=5,
                            parallelism=1.5) for T in (1, 2, 3)])
    got = html.TABLES["depth"]({"depth": dt})
    assert got.startswith("<details><summary>the table: 3 rows (depth.csv)</summary><table")
    assert got.endswith("</table></details>") and html.depth_table_html(dt) in got
