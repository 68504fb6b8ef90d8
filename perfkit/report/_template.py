# ruff: noqa: E501  (HTML and CSS read better unwrapped)
"""The report page: one jinja2 template, inline CSS and a few lines of JS; no external resources.

Kept as a Python string (not a package data file) so it ships with the code whatever the packaging.
"""

from __future__ import annotations

CSS = """
:root { --fg:#0f172a; --muted:#64748b; --line:#e2e8f0; --bg:#f8fafc; --card:#ffffff; --accent:#2563eb;
  --good:#166534; --good-bg:#dcfce7; --bad:#991b1b; --bad-bg:#fee2e2; --warn:#92400e; --warn-bg:#fef3c7; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--fg); background: var(--bg); }
header.top { background: #0f172a; color: #f8fafc; padding: 22px 32px 18px; }
header.top .kind { text-transform: uppercase; letter-spacing: .08em; font-size: 11px; color: #93c5fd; }
header.top h1 { margin: 4px 0 4px; font-size: 24px; font-weight: 650; }
header.top .sub { color: #cbd5e1; font-size: 13px; }
nav.toc { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid var(--line);
  padding: 8px 32px; font-size: 13px; white-space: nowrap; overflow-x: auto; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: 18px; }
main { max-width: 1200px; margin: 0 auto; padding: 18px 32px 48px; }
.sentence { font-size: 18px; font-weight: 550; background: var(--card); border-left: 5px solid var(--good);
  padding: 14px 18px; border-radius: 6px; margin: 8px 0 16px; box-shadow: 0 1px 2px rgba(0,0,0,.05); }
.sentence.none { border-left-color: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; margin: 10px 0 18px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card .label { color: var(--muted); font-size: 12px; }
.card .value { font-size: 24px; font-weight: 650; margin-top: 2px; }
.card .value small { font-size: 13px; font-weight: 500; color: var(--muted); }
.card .hint { color: var(--muted); font-size: 12px; }
.card.good { border-color: #86efac; } .card.good .value { color: var(--good); }
.card.bad { border-color: #fca5a5; } .card.bad .value { color: var(--bad); }
.card.warn { border-color: #fcd34d; } .card.warn .value { color: var(--warn); }
.banner { padding: 9px 14px; border-radius: 6px; margin: 6px 0; font-size: 13.5px; }
.banner.bad { background: var(--bad-bg); color: var(--bad); }
.banner.warn { background: var(--warn-bg); color: var(--warn); }
.banner.info { background: #e0f2fe; color: #075985; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px;
  margin: 18px 0; }
section > h2 { margin: 0 0 4px; font-size: 18px; }
section > p.intro { margin: 0 0 10px; color: var(--muted); }
.block { margin: 14px 0 6px; }
.block h3 { font-size: 14.5px; margin: 0 0 4px; }
svg.fig { width: 100%; height: auto; display: block; }
.caption { color: var(--muted); font-size: 12.5px; margin: 2px 0 6px; }
details { margin: 6px 0; }
details > summary { cursor: pointer; color: var(--accent); font-size: 13px; }
.tablewrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 9px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background: #f1f5f9; font-weight: 600; color: #334155; position: sticky; top: 0; }
td.text, th.text { text-align: left; white-space: normal; max-width: 420px; }
td.text:first-child { white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafcff; }
td.good { background: var(--good-bg) !important; color: var(--good); font-weight: 600; }
td.bad { background: var(--bad-bg) !important; color: var(--bad); font-weight: 600; }
td.warn { background: var(--warn-bg) !important; color: var(--warn); }
.note { color: var(--muted); font-size: 12px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 18px; margin: 6px 0; font-size: 13px; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-word; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: #f8fafc; border: 1px solid var(--line); padding: 10px; border-radius: 6px; overflow-x: auto; }
pre.diff { padding: 0; } pre.diff span { display: block; padding: 0 10px; }
pre.diff .add { background: var(--good-bg); color: var(--good); }
pre.diff .del { background: var(--bad-bg); color: var(--bad); }
pre.diff .hunk { background: #e0f2fe; color: #075985; } pre.diff .meta { color: var(--muted); font-weight: 600; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 20px; }
button.dl { font: inherit; font-size: 12px; border: 1px solid var(--line); background: #fff; border-radius: 5px;
  padding: 3px 9px; cursor: pointer; color: var(--accent); }
@media print { nav.toc { display: none; } section { break-inside: avoid-page; } details { display: block; } }
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="perfkit {{ page.perfkit_version }}">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{{ page.title }}</title>
<style>{{ css }}</style>
</head>
<body>
<header class="top">
  <div class="kind">perfkit {{ page.kind }} report</div>
  <h1>{{ page.title }}</h1>
  <div class="sub">{{ page.subtitle }}</div>
</header>
<nav class="toc">{% for s in page.sections %}<a href="#{{ s.id }}">{{ s.title }}</a>{% endfor %}</nav>
<main>
{% if page.sentence %}<div class="sentence{{ ' none' if page.sentence_bad }}" id="recommendation">{{ page.sentence }}</div>{% endif %}
{% for b in page.banners %}<div class="banner {{ b.cls }}">{{ b.text }}</div>{% endfor %}
{% if page.cards %}<div class="cards">
{% for c in page.cards %}<div class="card {{ c.cls }}"><div class="label">{{ c.label }}</div>
<div class="value">{{ c.value }}{% if c.unit %} <small>{{ c.unit }}</small>{% endif %}</div>
{% if c.hint %}<div class="hint">{{ c.hint }}</div>{% endif %}</div>
{% endfor %}</div>{% endif %}
{% for s in page.sections %}
<section id="{{ s.id }}">
<h2>{{ s.title }}</h2>
{% if s.intro %}<p class="intro">{{ s.intro }}</p>{% endif %}
{% for b in s.blocks %}<div class="block">
{% if b.kind == "figure" %}
<h3>{{ b.title }}</h3>
<figure style="margin:0" data-figure="{{ b.key }}">{{ b.svg | safe }}</figure>
{% if b.caption %}<p class="caption">{{ b.caption }}</p>{% endif %}
{% for t in b.tables %}<details><summary>Numbers behind this figure: {{ t.title }}</summary>{{ table(t) }}</details>{% endfor %}
{% elif b.kind == "table" %}
{% if b.collapsed %}<details><summary>{{ b.table.title }} ({{ b.table.rows | length }} rows)</summary>{{ table(b.table) }}</details>
{% else %}<h3>{{ b.table.title }}</h3>{{ table(b.table) }}{% endif %}
{% elif b.kind == "facts" %}
{% if b.title %}<h3>{{ b.title }}</h3>{% endif %}
<dl class="facts">{% for k, v in b.facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
{% elif b.kind == "pre" %}
<details{{ ' open' if b.open }}><summary>{{ b.title }}</summary><pre>{{ b.text }}</pre></details>
{% elif b.kind == "diff" %}
<h3>{{ b.title }}</h3>
{% if b.lines %}<pre class="diff">{% for d in b.lines %}<span class="{{ d.kind }}">{{ d.text }}</span>{% endfor %}</pre>
{% else %}<p class="note">{{ b.empty }}</p>{% endif %}
{% elif b.kind == "text" %}
<p class="{{ b.cls }}">{{ b.text }}</p>
{% endif %}
</div>{% endfor %}
</section>
{% endfor %}
</main>
<footer>Written by perfkit {{ page.perfkit_version }} at {{ page.generated_utc }} &middot; self-contained: no network needed
&middot; every input record is embedded <button class="dl" id="download-data" type="button">download the data (JSON)</button>
</footer>
<script type="application/json" id="perfkit-data">{{ page.data_json | safe }}</script>
<script>
document.getElementById("download-data").addEventListener("click", function () {
  var text = document.getElementById("perfkit-data").textContent;
  var a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
  a.download = "perfkit-report-data.json";
  document.body.appendChild(a); a.click(); a.remove();
});
</script>
</body>
</html>
"""

TABLE_MACRO = """{% macro table(t) -%}
<div class="tablewrap" data-table="{{ t.key }}"><table>
<thead><tr>{% for c in t.columns %}<th class="{{ t.head_classes[loop.index0] }}">{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}{% set ri = loop.index0 %}<tr>{% for v in row %}<td class="{{ t.classes[ri][loop.index0] }}">{{ v }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div>
{% if t.note %}<p class="note">{{ t.note }}</p>{% endif %}
{%- endmacro %}
"""
