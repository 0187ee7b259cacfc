"""Package structure: the layers of docs/design.md hold (no import runs up them) and no import cycles between
xlnet_tf's modules, counting imports inside functions and dynamic loads (``importlib`` by a literal name, registries
of dotted names) too; each built-in task family is a package that no other family imports; the sources keep to the
line limit."""

import ast
import pathlib
import re

import xlnet_tf

ROOT = pathlib.Path(xlnet_tf.__file__).parent
DESIGN = ROOT.parent / "docs" / "design.md"

# The layers, top first: a module may import from its own layer and the layers below it. Members are paths under
# xlnet_tf/ (a package with all its modules, or a module); docs/design.md draws the same table.
LAYERS = (
    ("cli", ("__init__.py", "cli/")),
    ("runner", ("runner.py",)),
    ("batch", ("batch/",)),
    ("tasks", ("tasks/",)),
    ("finetuning", ("finetuning/",)),
    ("training", ("training/",)),
    ("objectives", ("objectives/", "flops.py")),
    ("data", ("data/",)),
    ("models", ("models/", "checkpoint.py", "hf/", "preprocessing.py")),
    ("layers", ("layers/",)),
    ("text", ("config.py", "tokenization.py")),
    ("kernels", ("kernels/", "ops/")),
    ("base", ("errors.py", "io_utils.py", "progress_lines.py", "registry.py")),
)
# A string that names a module of the package (``"xlnet_tf.tasks.squad:SquadFamily"``): a dynamic import.
DOTTED = re.compile(r"xlnet_tf(\.\w+)+(:\w+)?")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str) -> dict:
    """The xlnet_tf modules that module ``name`` imports anywhere in its body -> the line of the first such import:
    ``import``/``from ... import`` statements (``from pkg import mod`` counts as mod, ``from pkg import attr`` as
    pkg), and every string literal that is a dotted name of the package (``importlib.import_module("xlnet_tf.x")``,
    a registry's ``"xlnet_tf.x:Class"``), as the module it names."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str):
        while dotted and dotted not in MODULES:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [known(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package.rsplit(".", node.level - 1)[0], base]))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else known(base)
                       for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            targets = [known(node.value.partition(":")[0])]
        for target in targets:
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


def _layer_of() -> dict:
    """Module name -> (layer index, layer name), from ``LAYERS`` (0 = top)."""
    layers = {}
    for index, (layer, members) in enumerate(LAYERS):
        for member in members:
            module = "xlnet_tf" + ("" if member == "__init__.py" else "." + member.rstrip("/").removesuffix(".py"))
            for name in MODULES:
                if name == module or (member.endswith("/") and name.startswith(module + ".")):
                    layers[name] = (index, layer)
    return layers


def test_every_module_has_a_layer():
    """A new module or package is placed in ``LAYERS`` (and in docs/design.md's diagram)."""
    layers = _layer_of()
    assert not sorted(set(MODULES) - set(layers)), "modules in no layer of LAYERS (tests/test_package.py)"


def test_no_import_runs_up_the_layers():
    layers = _layer_of()
    upward = []
    for name in sorted(MODULES):
        for target, line in sorted(_imports(name).items()):
            if layers[target][0] < layers[name][0]:
                upward.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line} ({layers[name][1]}) imports "
                              f"{target} ({layers[target][1]}, a layer above)")
    assert not upward, "imports that run up the layers of docs/design.md:\n  " + "\n  ".join(upward)


def test_design_doc_draws_the_layers():
    """docs/design.md's layer diagram (the ``text`` block after "Layers, top to bottom") is ``LAYERS``."""
    text = DESIGN.read_text(encoding="utf-8")
    block = re.search(r"Layers, top to bottom.*?\n```text\n(.*?)\n```", text, re.S)
    assert block, "docs/design.md has no layer diagram"
    drawn = []
    for line in block.group(1).splitlines():
        words = line.split()
        members = []
        for word in words[1:]:
            if not (word.endswith("/") or word.endswith(".py")):
                break
            members.append(word)
        drawn.append((words[0], tuple(members)))
    assert drawn == [(layer, tuple(members)) for layer, members in LAYERS]


def test_no_import_cycles():
    graph = {name: set(_imports(name)) for name in MODULES}
    # A module importing its own package is no edge: importing the module has run the package's __init__ already
    # (so a package's __init__ that imports or loads its submodules is no cycle through them).
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


def test_a_builtin_family_is_a_package_of_its_own():
    """Each ``tasks.BUILTIN`` line names a package ``tasks/<family>/`` and no family's modules import another
    family's: a new built-in family is its package plus its registry line (docs/design.md)."""
    from xlnet_tf import tasks

    packages = [entry.partition(":")[0] for entry in tasks.BUILTIN]
    assert all(p.count(".") == 2 and MODULES[p].name == "__init__.py" for p in packages), packages

    def family(name):
        return next((p for p in packages if name == p or name.startswith(p + ".")), None)

    crossing = sorted(f"{name} imports {target}" for name in MODULES if family(name)
                      for target in _imports(name) if family(target) not in (None, family(name)))
    assert not crossing, "a family's modules import another family's:\n  " + "\n  ".join(crossing)


def test_module_names_say_what_a_module_is():
    """No two modules of the package share a base name (``export.py`` next to ``finetune/export.py`` was one)."""
    seen = {}
    for path in ROOT.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: where for name, where in seen.items() if len(where) > 1}


def test_every_class_registered_with_keras_is_found_before_its_module_is_imported():
    """``keras.saving.load_model`` finds xlnet_tf's classes after ``import xlnet_tf`` alone (tests/test_tasks.py)
    by the table of xlnet_tf/__init__.py: a class registered elsewhere would not load in such a process."""
    registered = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any("register_keras_serializable" in ast.unparse(d)
                                                      for d in node.decorator_list):
                registered.setdefault(name, []).append(node.name)
    assert {name: tuple(sorted(classes)) for name, classes in registered.items()} == xlnet_tf._KERAS_CLASSES


def test_no_private_keras_modules():
    """The package uses Keras 3's public API: no ``keras.src`` import (its layout changes between minor versions)."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("keras.src")]
    assert not offenders


def test_no_test_module_imports_another():
    """Shared test builders live in helper modules (``tests/*_helpers.py``, ``needs.py``, ``training_state.py``):
    importing a test module from another runs its module-level setup twice and couples the two files' tests."""
    tests = pathlib.Path(__file__).parent
    offenders = []
    for path in tests.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not offenders


def _bound_names(tree) -> set:
    """Names a file binds other than by an import (assignments, parameters, loop and ``with`` targets): a module
    alias reused as a local variable is not checked."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    return names | {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}


def _missing_package_names(path: pathlib.Path) -> list:
    """``file:line: name`` for each ``from xlnet_tf... import x`` and ``alias.x`` (alias an imported xlnet_tf
    module) in ``path`` that names nothing the package has."""
    import importlib

    def has(module: str, attr: str) -> bool:
        if hasattr(importlib.import_module(module), attr):
            return True
        return f"{module}.{attr}" in MODULES

    tree = ast.parse(path.read_text())
    aliases, missing = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in MODULES})
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in MODULES:
            for a in node.names:
                if not has(node.module, a.name):
                    missing.append(f"{path}:{node.lineno}: from {node.module} import {a.name}")
                elif f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    rebound = _bound_names(tree)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.value.id not in rebound and not has(aliases[node.value.id], node.attr)):
            missing.append(f"{path}:{node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return missing


def test_benchmarks_name_only_what_the_package_has(tmp_path):
    """bench/ is run by hand, not by this suite: a renamed function broke bench/bench_data.py unseen
    (``writer.list_input_files``, gone for ``io_utils.glob_files``). Every package name a benchmark imports or
    reads off an imported module exists."""
    bench = ROOT.parent / "bench"
    missing = [line for path in sorted(bench.rglob("*.py")) for line in _missing_package_names(path)]
    assert not missing, "\n".join(missing)
    # the check finds such names, and leaves a module alias reused as a local variable alone
    probe = tmp_path / "probe.py"
    probe.write_text("from xlnet_tf.data import writer as cpd\nfrom xlnet_tf.io_utils import gone\n"
                     "from xlnet_tf import ops\ncpd.list_input_files('x')\ncpd.run\n"
                     "def f(text):\n    ops = {}\n    return ops.most_common\n")
    assert [line.split(": ", 1)[1] for line in _missing_package_names(probe)] == [
        "from xlnet_tf.io_utils import gone", "cpd.list_input_files (xlnet_tf.data.writer)"]


def test_source_lines_fit_120_columns():
    """The project's line limit, 120 characters, in every file of code or settings a reader opens (the package
    and its kernels, the entry points, tests, benchmarks, scripts and configs): the set-up installs no linter, and
    longer lines had crept into bench/ and tests/ unseen."""
    repo = ROOT.parent
    patterns = ("xlnet_tf/**/*.py", "xlnet_tf/**/*.cc", "xlnet_tf/**/*.h", "*.py", "tests/**/*.py", "bench/**/*.py",
                "bench/**/*.sh", "scripts/*", "configs/*", "pyproject.toml")
    files = {path for pattern in patterns for path in repo.glob(pattern) if path.is_file()}
    assert len(files) > 200, sorted(files)  # the patterns still find the tree
    too_long = [f"{path.relative_to(repo)}:{number}: {len(line)} characters" for path in sorted(files)
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 120]
    assert not too_long, too_long
