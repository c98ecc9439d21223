"""The files users hand to importers: paths expanded (a directory stands for its files of the kinds it takes) and
read, every problem one line naming the file. (JSON documents themselves are read by :mod:`pmdb.jsonfile`.)"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pmdb.errors import PmdbError


def expand_files(paths: Sequence[Path], suffixes: tuple[str, ...], what: str) -> list[Path]:
    """Files as given; a directory stands for its files ending in one of ``suffixes`` (sorted, not recursive).
    A missing path, or a directory without such files (``what`` names them), is refused."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(suffixes))
            if not found:
                raise PmdbError(f"{path}: a directory without {what}")
            out.extend(found)
        elif not path.is_file():
            raise PmdbError(f"no such file: {path}")
        else:
            out.append(path)
    return out


def read_bytes(path: Path) -> bytes:
    """The file's bytes; a file that cannot be read is one line."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise PmdbError(f"cannot read {path}: {exc.strerror or exc}") from None
