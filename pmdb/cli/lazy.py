"""Lazily registered commands: a command's module (and what it imports: pandas, DuckDB, torch, MLflow) is imported
only when that command runs or shows its own help, so `pmdb --help` and `pmdb status` start in a fraction of the time.

The root help lists every command with the help its module gives it, read from the module's source (a function's
docstring, a sub-app's ``typer.Typer(help=...)``) without importing it; where the source does not say it plainly,
the module is imported. tests/pmdb/cli/test_lazy_commands.py checks that every help text is what the eagerly
registered app prints."""
from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple, Optional

import typer
import typer.core
import typer.main


class Entry(NamedTuple):
    """Where a command comes from: the module whose ``register(app)`` adds it, and the function or sub-app (a
    ``typer.Typer`` at module level) that holds its help."""

    module: str
    attribute: str


_sources: dict[str, Optional[ast.Module]] = {}  # module -> its parsed source (None: not found or unreadable)
_built: dict[str, dict[str, Any]] = {}  # module -> its click commands, built once per process (typer reads every
#                                         parameter of every function: tens of milliseconds per module)


def source_help(entry: Entry) -> Optional[str]:
    """The help typer gives the command, read from the module's source; None when the source does not say it as a
    docstring or a literal ``help=`` of a module-level ``typer.Typer(...)``."""
    if entry.module not in _sources:
        spec = importlib.util.find_spec(entry.module)
        try:
            with open(spec.origin, encoding="utf-8") as handle:  # type: ignore[union-attr, arg-type]
                _sources[entry.module] = ast.parse(handle.read())
        except (AttributeError, TypeError, OSError, SyntaxError, ValueError):
            _sources[entry.module] = None
    tree = _sources[entry.module]
    for node in tree.body if tree is not None else []:
        if isinstance(node, ast.FunctionDef) and node.name == entry.attribute:
            return ast.get_docstring(node)  # cleaned as typer's inspect.getdoc cleans it
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == entry.attribute for t in node.targets)):
            for keyword in node.value.keywords:
                if keyword.arg == "help":
                    try:
                        text = ast.literal_eval(keyword.value)
                    except ValueError:
                        return None
                    return text if isinstance(text, str) else None
    return None


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands by name, in the order of ``table``: looking one up imports its module and registers all
    of that module's commands (built once per process, as the eagerly registered app built them once at import);
    listing the names imports nothing."""

    def __init__(self, loaded: MutableMapping[str, Any], table: dict[str, Entry]):
        self._loaded = dict(loaded)
        self._table = table

    def loaded(self, name: str) -> Optional[Any]:
        """The command if its module is registered already, else None (nothing is imported)."""
        return self._loaded.get(name)

    def _load(self, module_name: str) -> None:
        if module_name not in _built:
            module = importlib.import_module(module_name)
            sub = typer.Typer()
            module.register(sub)
            _built[module_name] = dict(typer.main.get_group(sub).commands)
        for name, command in _built[module_name].items():
            self._loaded.setdefault(name, command)

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded and name in self._table:
            self._load(self._table[name].module)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._loaded.pop(name, None)
        self._table = {k: v for k, v in self._table.items() if k != name}

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._table

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        yield from (name for name in self._loaded if name not in self._table)

    def __len__(self) -> int:
        return len(set(self._table) | set(self._loaded))


class LazyGroup(typer.core.TyperGroup):
    """A typer group whose commands come from ``table`` (name -> Entry; set it in a subclass) on first use."""

    table: dict[str, Entry] = {}
    _listing = False

    def __init__(self, **attrs: Any):
        super().__init__(**attrs)
        self.commands: LazyCommands = LazyCommands(self.commands, self.table)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: nothing imported

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            return None
        if self._listing and cmd_name in self.table and self.commands.loaded(cmd_name) is None:
            text = source_help(self.table[cmd_name])
            if text is not None:  # a stand-in that carries the help the listing shows
                return typer.core.TyperCommand(name=cmd_name, help=text)
        return self.commands[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """This group's help; its command list from the sources, importing no command module."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
