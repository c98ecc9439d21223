"""The layers run one way: import-linter's contracts (``.importlinter``) hold, nothing below the CLI imports it, and no
module imports another module's private names."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pmdb", "collectors", "fitters", "simulator", "shard", "planner", "report")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return out


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import of a file, including those inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names], node.lineno))
    return found


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is missing: `make test` installs it with the test extra (import-linter)")
    done = subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_nothing_below_the_cli_imports_it():
    offenders = [f"{module}:{line} imports {target}" for module, path in _modules()
                 if not module.startswith("pmdb.cli") and module != "pmdb.__main__"
                 for target, _, line in _imports(path) if target == "pmdb.cli" or target.startswith("pmdb.cli.")]
    assert offenders == []


def test_no_module_imports_private_names_of_another():
    known = {module for module, _ in _modules()}
    offenders = []
    for module, path in _modules():
        for target, names, line in _imports(path):
            if target in known and target != module:
                offenders += [f"{module}:{line} takes {target}.{n}" for n in names
                              if n.startswith("_") and not n.startswith("__")]
    assert offenders == []
