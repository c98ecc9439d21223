"""Notices on stderr (``pmdb: note: ...``, ``pmdb: warning: ...``) and long printed lines, wrapped to the terminal's
width (lines after the first indented by two spaces) so that none is wider than the terminal. Printed to a pipe or
a file without $COLUMNS, each stays one line (grep finds it whole)."""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import TextIO

MIN_WIDTH = 40  # narrowest width wrapped to


def width() -> int | None:
    """Columns to wrap to: $COLUMNS, else the terminal's when stdout or stderr is one (at least MIN_WIDTH); None
    when neither says (a pipe or a file: no wrapping)."""
    if "COLUMNS" not in os.environ and not (sys.stdout.isatty() or sys.stderr.isatty()):
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def wrapped(text: str, columns: int | None = None) -> str:
    """``text`` wrapped to ``columns`` (default: :func:`width`; unchanged when that is None), continuation lines
    indented by two spaces; words (paths, commands) are never broken."""
    columns = columns or width()
    if columns is None:
        return text
    return textwrap.fill(text, columns, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def say(kind: str, text: str, stream: TextIO | None = None) -> None:
    """Print ``pmdb: KIND: TEXT`` wrapped to the terminal (stderr unless ``stream``)."""
    print(wrapped(f"pmdb: {kind}: {text}"), file=stream or sys.stderr)
