"""Reading the JSON files users hand to the workload commands (shape, plan, config overrides)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError


def read_json(path: Path, what: str) -> Any:
    """The parsed content of ``path``; a missing file or bad JSON is a one-line PmdbError naming ``what``."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise PmdbError(f"cannot read {what} {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise PmdbError(f"{what} {path} is not JSON: {exc}") from None
