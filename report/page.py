"""The report's HTML: one offline page (no scripts, no external files), figures beside it as PNGs. Every section
has an ``id`` and is always present; one without data says what is missing and which command produces it. Long
tables scroll inside a box so the page stays short."""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:1250px}"
         "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
         "text-align:right}th{background:#eee;position:sticky;top:0}td:first-child{text-align:left}"
         ".scroll{max-height:19em;overflow:auto;display:inline-block;border:1px solid #ddd;margin:0.3em 0}"
         ".notyet{color:#555;font-style:italic}.warn{color:#8a4b00;background:#fff4e0;padding:0.3em 0.6em;margin:0.2em 0}"
         ".note{color:#333}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0;display:block}"
         "h2{margin-top:1.2em;border-top:1px solid #ccc;padding-top:0.4em}h3{margin:0.5em 0 0.2em;"
         "font-size:14px}ul.toc li{margin:0.1em 0}")


@dataclass
class Table:
    """A caption and a frame; ``html`` names columns whose cells are already HTML (links), the rest is escaped."""

    caption: str
    frame: pd.DataFrame
    html: tuple[str, ...] = ()


@dataclass
class Section:
    """One part of the page: a title, what it shows, warnings and notes, its figures (file names), tables, or
    what is missing (and the command that produces it)."""

    key: str
    title: str
    text: str
    figures: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missing: str | None = None


def _cell(value: object) -> str:
    if value is None or (not isinstance(value, (list, dict, str)) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def table_html(table: Table) -> str:
    """The table inside a scrolling box (header row stays visible)."""
    frame = table.frame
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = [str(v) if c in table.html and v is not None else _cell(v) for c, v in zip(frame.columns, row)]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f"<h3>{html.escape(table.caption)}</h3><div class='scroll'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def not_run_yet(missing: str) -> str:
    """'not run yet: <command> (<what is absent>)' from a section's ``missing`` ('<what is absent>: run <command>');
    a text without ': run ' is kept after 'not run yet: '."""
    absent, sep, command = missing.partition(": run ")
    return f"not run yet: {command} ({absent})" if sep and absent else f"not run yet: {missing}"


def render(sections: list[Section], store_path: str, platform: str | None) -> str:
    """The whole page."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>pmdb report</title><style>{STYLE}</style>"
             "</head><body><h1>pmdb report</h1>",
             f"<p>store {html.escape(store_path)}; platform {html.escape(platform or 'all')}; "
             f"generated {datetime.now().isoformat(timespec='seconds')}</p><ul class='toc'>"]
    for s in sections:
        flags = (" (not run yet)" if s.missing else "") + (f" ({len(s.warnings)} warning(s))" if s.warnings else "")
        parts.append(f"<li><a href='#{s.key}'>{html.escape(s.title)}</a>{flags}</li>")
    parts.append("</ul>")
    for s in sections:
        parts.append(f"<section id='{s.key}'><h2>{html.escape(s.title)}</h2><p>{html.escape(s.text)}</p>")
        if s.missing:
            parts.append(f"<p class='notyet'>{html.escape(not_run_yet(s.missing))}</p>")
        parts += [f"<p class='warn'>Warning: {html.escape(w)}</p>" for w in s.warnings]
        if s.notes:
            parts.append("<ul class='note'>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.notes) + "</ul>")
        parts += [f"<img src='{html.escape(f)}' alt='{html.escape(f)}'>" for f in s.figures]
        parts += [table_html(t) for t in s.tables]
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
