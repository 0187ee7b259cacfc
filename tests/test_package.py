"""Package structure: no import cycles between xlnet_tf's modules (counting imports inside functions too)."""

import ast
import pathlib

import xlnet_tf

ROOT = pathlib.Path(xlnet_tf.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The xlnet_tf modules that ``path`` imports anywhere in its body (``from pkg import mod`` counts as mod)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in modules}


def test_no_import_cycles():
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}
    # A package's own __init__ importing its submodules is not a cycle through them.
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not name.startswith(dep + ".")}

    def reaches(start, target, seen):
        for dep in graph[start]:
            if dep == target:
                return True
            if dep not in seen:
                seen.add(dep)
                if reaches(dep, target, seen):
                    return True
        return False

    cycles = sorted(name for name in graph if reaches(name, name, set()))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_module_names_say_what_a_module_is():
    """No two modules of the package share a base name (``export.py`` next to ``finetune/export.py`` was one)."""
    seen = {}
    for path in ROOT.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: where for name, where in seen.items() if len(where) > 1}


def test_no_private_keras_modules():
    """The package uses Keras 3's public API: no ``keras.src`` import (its layout changes between minor versions)."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("keras.src")]
    assert not offenders
