"""One self-contained HTML page: plotly's bundled JavaScript inline, figures as JSON, a table.

Why this shape: a report must open from a laptop's disk, a copied folder or a bucket download
with no network (plotly.js is inlined from the plotly wheel, `plotly.offline.get_plotlyjs()`,
not fetched from a CDN), and building it must not load TensorFlow or plotly's Python figure
classes (the search refreshes it after every trial): figures are plain dicts in plotly.js's
JSON schema, drawn by a few lines of JavaScript in the page.

Everything user-made (architectures, paths, settings) reaches the page as escaped text: JSON
in a `<script type="application/json">` with `<`, `>` and `&` escaped, table cells through
`html.escape`, so no value can close a tag or run script.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from typing import Any, Mapping, Sequence

# Page-wide plotly config: no link out to plotly's site, no logo; plots follow the window.
_PLOT_CONFIG = {'displaylogo': False, 'responsive': True,
                'modeBarButtonsToRemove': ['sendDataToCloud']}

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;
max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.4rem;margin-bottom:.2rem}h2{font-size:1.1rem;margin-top:2rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}
.summary{color:#444}.note{color:#666;font-size:.85rem;margin:.2rem 0 .6rem}
.plot{width:100%;height:420px}.grid{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
@media(max-width:900px){.grid{grid-template-columns:1fr}}
table.sortable{border-collapse:collapse;font-size:.85rem;width:100%}
table.sortable th,table.sortable td{border-bottom:1px solid #eee;padding:.25rem .5rem;
text-align:right;vertical-align:top}
table.sortable th{cursor:pointer;background:#f6f6f6;position:sticky;top:0;user-select:none}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
table.sortable td.text,table.sortable th.text{text-align:left}
td.arch{font-family:ui-monospace,monospace;font-size:.75rem;color:#333}
pre{background:#f6f6f6;padding:.8rem;overflow:auto;font-size:.8rem}
.status-completed{color:#1a7f37}.status-stopped{color:#777}
.status-failed,.status-failed_with_nan,.status-infeasible{color:#c62828}
.status-over_target{color:#c45a00}
"""

# Draws every figure of the page and makes every table.sortable sortable by a header click
# (numbers by value, text as text, empty cells last either way).
_SCRIPT = """
(function(){
  var figs = JSON.parse(document.getElementById('figures').textContent);
  figs.forEach(function(f){
    Plotly.newPlot(f.id, f.data, f.layout, f.config);
  });
  document.querySelectorAll('table.sortable').forEach(function(table){
    var heads = table.querySelectorAll('th');
    heads.forEach(function(th, col){
      th.addEventListener('click', function(){
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        heads.forEach(function(h){ h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var key = function(r){ var c = r.cells[col];
          return c.hasAttribute('data-value') ? c.getAttribute('data-value') : c.textContent; };
        var numeric = th.classList.contains('num');
        rows.sort(function(a, b){
          var x = key(a), y = key(b);
          if (x === '' || y === '') { return (x === '') - (y === ''); }
          var d = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y, undefined,
                                                                             {numeric: true});
          return asc ? d : -d;
        });
        rows.forEach(function(r){ body.appendChild(r); });
      });
    });
  });
})();
"""


def plotly_js() -> str:
  """plotly.js as the plotly wheel bundles it (a few MB; read once per process)."""
  global _PLOTLY_JS
  if _PLOTLY_JS is None:
    from plotly.offline import get_plotlyjs  # pylint: disable=g-import-not-at-top
    _PLOTLY_JS = get_plotlyjs()
  return _PLOTLY_JS


_PLOTLY_JS: str | None = None


def script_json(value: Any) -> str:
  """JSON safe inside a <script> element: no character of it can end the element."""
  text = json.dumps(value, allow_nan=False, separators=(',', ':'))
  return text.replace('<', '\\u003c').replace('>', '\\u003e').replace('&', '\\u0026')


def finite(value: Any) -> float | None:
  """A finite number, else None (JSON and plotly have no NaN)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  return float(value) if math.isfinite(value) else None


@dataclasses.dataclass
class Column:
  """A table column: its header, whether it sorts as numbers, and a cell's text."""
  header: str
  numeric: bool = True
  css: str = ''


@dataclasses.dataclass
class Cell:
  """A table cell: `text` shown (escaped), `value` sorted on, optional link and class."""
  text: str
  value: float | str | None = None
  href: str | None = None
  css: str = ''
  details: str | None = None  # shown when the cell is opened (a long architecture)


class Page:
  """Sections in order; `render()` gives the whole HTML document."""

  def __init__(self, title: str, summary: str):
    self.title = title
    self.summary = summary
    self._parts: list[str] = []
    self._figures: list[dict[str, Any]] = []

  def heading(self, text: str, note: str | None = None) -> None:
    self._parts.append(f'<h2>{html.escape(text)}</h2>')
    if note:
      self._parts.append(f'<p class="note">{html.escape(note)}</p>')

  def text(self, text: str, css: str = 'note') -> None:
    self._parts.append(f'<p class="{css}">{html.escape(text)}</p>')

  def plots(self, *figures: Mapping[str, Any]) -> None:
    """Figures side by side (two per row): each {id, data, layout}."""
    divs = []
    for figure in figures:
      self._figures.append({'id': figure['id'], 'data': list(figure['data']),
                            'layout': dict(figure['layout']), 'config': _PLOT_CONFIG})
      height = figure['layout'].get('height')  # a tall figure (many bars) gets its height
      style = f' style="height:{int(height)}px"' if isinstance(height, (int, float)) else ''
      divs.append(f'<div class="plot" id="{html.escape(figure["id"])}"{style}></div>')
    css = 'grid' if len(divs) > 1 else 'single'
    self._parts.append(f'<div class="{css}">{"".join(divs)}</div>')

  def table(self, table_id: str, columns: Sequence[Column],
            rows: Sequence[Sequence[Cell]]) -> None:
    head = ''.join(
        f'<th class="{" ".join(x for x in ("num" if c.numeric else "text", c.css) if x)}">'
        f'{html.escape(c.header)}</th>' for c in columns)
    body = []
    for row in rows:
      cells = []
      for column, cell in zip(columns, row):
        classes = ' '.join(x for x in ('' if column.numeric else 'text', column.css, cell.css)
                           if x)
        attrs = f' class="{html.escape(classes)}"' if classes else ''
        if cell.value is not None:
          attrs += f' data-value="{html.escape(str(cell.value))}"'
        elif column.numeric:
          attrs += ' data-value=""'
        text = html.escape(cell.text)
        if cell.href:
          text = f'<a href="{html.escape(cell.href)}">{text}</a>'
        if cell.details:
          text = f'<details><summary>{text}</summary>{html.escape(cell.details)}</details>'
        cells.append(f'<td{attrs}>{text}</td>')
      body.append(f'<tr>{"".join(cells)}</tr>')
    self._parts.append(f'<table class="sortable" id="{html.escape(table_id)}"><thead><tr>'
                       f'{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')

  def preformatted(self, element_id: str, text: str) -> None:
    self._parts.append(f'<pre id="{html.escape(element_id)}">{html.escape(text)}</pre>')

  def render(self) -> str:
    return ''.join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<title>{html.escape(self.title)}</title><style>{_STYLE}</style>',
        f'<script>{plotly_js()}</script></head><body>',
        f'<h1>{html.escape(self.title)}</h1><p class="summary">{html.escape(self.summary)}</p>',
        *self._parts,
        f'<script type="application/json" id="figures">{script_json(self._figures)}</script>',
        f'<script>{_SCRIPT}</script></body></html>\n',
    ])
