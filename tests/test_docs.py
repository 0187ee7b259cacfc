"""The documentation a newcomer reads stays short, and what it points at exists: size limits of the README and of
docs/, relative links, the ``python -m xlnet_tf...`` tools it names, and the bench scripts' generated blocks."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README_LIMIT = 10_000  # bytes
DOCS_LIMIT = 75_000  # bytes, docs/ in all: reference only; measurements live in bench/reports/

# Every Markdown file a reader is sent to from the README.
MARKDOWN = sorted([ROOT / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").rglob("*.md"),
                   *(ROOT / "bench" / "reports").rglob("*.md")])


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (a ``](`` inside code is not a link)."""
    text = re.sub(r"(?ms)^```.*?^```", "", text)
    return re.sub(r"`[^`\n]*`", "", text)


def test_readme_and_docs_sizes():
    readme = (ROOT / "README.md").stat().st_size
    assert readme <= README_LIMIT, f"README.md is {readme} bytes (limit {README_LIMIT})"
    sizes = {p.relative_to(ROOT).as_posix(): p.stat().st_size for p in (ROOT / "docs").rglob("*") if p.is_file()}
    assert sum(sizes.values()) <= DOCS_LIMIT, (
        f"docs/ holds {sum(sizes.values())} bytes (limit {DOCS_LIMIT}): {sizes}; measurements and experiment "
        "write-ups belong in bench/reports/")


def _anchors(path: pathlib.Path) -> set:
    """GitHub's anchors of ``path``'s headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"(?m)^#+ (.+)$", re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8")))
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_resolve():
    broken = []
    for path in MARKDOWN:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(path.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file, _, anchor = target.partition("#")
            linked = path.parent / file if file else path
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, f"links to files or headings that do not exist: {broken}"


def test_named_tools_exist():
    """Every ``python -m xlnet_tf.<module>`` in the docs is a module of this tree (a renamed tool fails here)."""
    missing = set()
    for path in MARKDOWN:
        for module in re.findall(r"python -m (xlnet_tf[\w.<>]*\w>?)", path.read_text(encoding="utf-8")):
            if "<" in module:
                continue  # a placeholder: python -m xlnet_tf.cli.<tool>
            base = ROOT.joinpath(*module.split("."))
            if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
                missing.add(f"{path.relative_to(ROOT)}: python -m {module}")
    assert not missing, f"tools named in the docs that do not exist: {sorted(missing)}"


def test_generated_blocks_match_their_scripts():
    """A block between ``<!-- script.py:begin -->`` and ``<!-- script.py:end -->`` is rewritten by bench/script.py
    (bench/reporting.py): the script exists and names the file it writes; every script that writes blocks has
    its block in some file."""
    found = {}
    for path in MARKDOWN:
        text = _prose(path.read_text(encoding="utf-8"))  # markers quoted as code are no blocks
        begins = re.findall(r"<!-- ([\w.]+):begin -->", text)
        ends = re.findall(r"<!-- ([\w.]+):end -->", text)
        assert begins == ends, f"{path.relative_to(ROOT)}: unbalanced block markers {begins} / {ends}"
        for script in begins:
            if script.endswith(".py"):
                found.setdefault(script, []).append(path)
    for script, paths in found.items():
        source = ROOT / "bench" / script
        assert source.is_file(), f"block of {script} in {[str(p) for p in paths]}, but bench/{script} is missing"
        for path in paths:
            # The script joins the target's path from the root or from bench/: "docs", "x.md" / "reports", "x.md".
            parts = path.relative_to(ROOT).parts
            forms = {", ".join(f'"{p}"' for p in parts[i:]) for i in range(2 if parts[0] == "bench" else 1)}
            assert any(form in source.read_text(encoding="utf-8") for form in forms), (
                f"{path.relative_to(ROOT)} holds a {script} block, but bench/{script} writes elsewhere "
                f"(no {' or '.join(sorted(forms))} in it)")
    writers = {p.name for p in (ROOT / "bench").glob("*.py") if "replace_block(" in p.read_text(encoding="utf-8")}
    writers.discard("reporting.py")
    assert writers <= set(found), f"bench scripts whose generated block is in no file: {sorted(writers - set(found))}"


def test_readme_claims_the_speed_its_table_measured():
    """The README's headline ratios (best against best; float32 against HF's fastest float32 row) are the ones in
    the benchmark's generated block, to the digit they are given: rewriting the table leaves no stale claim."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    claim = re.search(r"\*\*Fast\.\*\* A pretraining step runs ([\d.]+)x faster .*?\), ([\d.]+)x in float32", readme,
                      re.S)
    measured = re.search(r"\*\*Best against best:\*\* .*? ([\d.]+)x\. Same precision.*? float32 .*?HF ([\d.]+)x",
                         readme)
    assert claim and measured, "the README's speed claim or bench_pretrain.py's best-against-best line is missing"
    for said, table in zip(claim.groups(), measured.groups()):
        digits = len(said.partition(".")[2])
        assert said == f"{float(table):.{digits}f}", (
            f"README.md claims {said}x where its table measured {table}x: write the table's figure")
