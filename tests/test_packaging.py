"""The package list in pyproject.toml covers every code directory, so a non-editable install has all of pmdb."""
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_ROOTS = ["pmdb", "collectors", "fitters", "simulator", "planner", "shard", "report"]


def _config():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_dirs(config):
    mapped = config.get("package-dir", {})
    return {pkg: ROOT / mapped.get(pkg, pkg.replace(".", "/")) for pkg in config["packages"]}


def test_every_code_directory_is_a_listed_package():
    listed = set(_package_dirs(_config()).values())
    missing = []
    for root in CODE_ROOTS:
        for directory in [ROOT / root, *(p for p in (ROOT / root).rglob("*") if p.is_dir())]:
            if "__pycache__" in directory.parts:
                continue
            if any(directory.glob("*.py")) or any(directory.glob("*.json")):
                if directory not in listed:
                    missing.append(str(directory.relative_to(ROOT)))
                elif not (directory / "__init__.py").exists():
                    missing.append(f"{directory.relative_to(ROOT)} (no __init__.py)")
    assert missing == []


def test_data_files_are_package_data():
    config = _config()
    patterns = config.get("package-data", {})
    uncovered = []
    for pkg, directory in _package_dirs(config).items():
        for path in directory.rglob("*"):
            if path.is_file() and path.suffix in {".sql", ".json"} and "__pycache__" not in path.parts:
                rel = path.relative_to(directory).as_posix()
                if not any(fnmatch.fnmatch(rel, pat) for pat in patterns.get(pkg, [])):
                    # a file in a sub-package is checked against that sub-package
                    if not any(path.parent == d for d in _package_dirs(config).values() if d != directory):
                        uncovered.append(f"{pkg}: {rel}")
    assert uncovered == []
