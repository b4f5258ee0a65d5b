"""Shapes of the code that a reader pays for and no other gate sees: functions that take so many loose
parameters that a call cannot be read without the signature beside it.

The source is read with ast, nothing is run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "perfstack"

MANY = 10  # parameters (self and cls not counted) from which a function has too many
# The few that keep that many, and why: each parameter is a knob a user sets by name.
MANY_ALLOWED = {
    "checks.py:register",  # a check's declaration: id, layer, title, doc, why, fix... (keyword-only)
    "profile/api.py:Profile.__init__",  # the public perfstack.profile(): the profile command's flags, by keyword
    "estimate/memory.py:training",  # the training memory model's inputs: the parallelism degrees and precision
}
MOST_ALLOWED = 3


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((prefix + node.name, node))
            out += _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, prefix + node.name + ".")
    return out


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def many_parameters(src: Path = SRC) -> dict[str, int]:
    """``path:qualified name`` -> parameter count, for every function with MANY or more."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, fn in _functions(tree):
            n = len(parameters(fn))
            if n >= MANY:
                found[f"{path.relative_to(src).as_posix()}:{name}"] = n
    return found


def test_the_count_sees_every_kind_of_parameter():
    tree = ast.parse("class C:\n    def f(self, a, /, b, *c, d, **e): pass\n"
                     "def g(a, b, c, d, e, f, g, h, i, j): pass\n")
    (_, f), (_, g) = _functions(tree)
    assert parameters(f) == ["a", "b", "d", "c", "e"]
    assert len(parameters(g)) == MANY


def test_few_functions_take_ten_parameters_or_more():
    """A function that takes ten loose values wants a parameter object (a LevelSpec, a plan): named once,
    passed whole, checked in one place."""
    found = many_parameters()
    unexpected = sorted(set(found) - MANY_ALLOWED)
    assert not unexpected, (f"{len(unexpected)} new function(s) with {MANY} or more parameters: "
                            + ", ".join(f"{k} ({found[k]})" for k in unexpected)
                            + "; pass a parameter object instead")
    assert len(found) <= MOST_ALLOWED, found


# -- records built by keyword ------------------------------------------------------------------------------

MOST_POSITIONAL_FIELDS = 5  # a record with more fields than this is built by keyword


def _module(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_record_module(mod: str) -> bool:
    """The Run's section records: model.py, and every ``record`` module or ``records`` package."""
    return mod == "perfstack.model" or any(p in ("record", "records") for p in mod.split(".")[1:])


def _imported(tree: ast.AST, mod: str, top_only: bool = False) -> dict[str, tuple[str, str]]:
    """name as the file writes it -> (module, name) it was imported as: ``from X import Y`` (in functions
    too, unless ``top_only``), and a module imported under an alias (``(module, "")``)."""
    names = {}
    for n in (tree.body if top_only and isinstance(tree, ast.Module) else ast.walk(tree)):
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = mod.split(".")[: len(mod.split(".")) - n.level]
                base = ".".join(up + ([base] if base else []))
            names.update({a.asname or a.name: (base, a.name) for a in n.names})
        elif isinstance(n, ast.Import):
            names.update({a.asname: (a.name, "") for a in n.names if a.asname})
    return names


def _init_fields(cls: ast.ClassDef) -> list[str]:
    """The fields a record's constructor takes, in order (not ClassVars, not ``field(init=False)``)."""
    out = []
    for s in cls.body:
        if not (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)) or "ClassVar" in ast.unparse(s.annotation):
            continue
        v = s.value
        if isinstance(v, ast.Call) and any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                                           for k in v.keywords):
            continue
        out.append(s.target.id)
    return out


def record_fields(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """(module, class) -> the constructor's fields, base classes' first, for every record class."""
    own: dict[tuple[str, str], tuple[list[tuple[str, str]], list[str]]] = {}
    for path in sorted(src.rglob("*.py")):
        mod = _module(path, src)
        if _is_record_module(mod):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            imported = _imported(tree, mod)
            for n in tree.body:
                if isinstance(n, ast.ClassDef):
                    bases = [imported.get(ast.unparse(b), (mod, ast.unparse(b))) for b in n.bases]
                    own[(mod, n.name)] = (bases, _init_fields(n))

    def fields(key: tuple[str, str]) -> list[str]:
        bases, mine = own[key]
        return [f for b in bases if b in own and b != key for f in fields(b)] + mine
    return {k: fields(k) for k in own}


def positional_record_calls(src: Path = SRC) -> list[str]:
    """Every call that builds a record of more than MOST_POSITIONAL_FIELDS fields with positional arguments."""
    records = record_fields(src)
    faces = {}  # (module, name) -> where it comes from, for names a module hands on (a package's __init__)
    trees = {}
    for path in sorted(src.rglob("*.py")):
        mod = _module(path, src)
        trees[path] = (mod, ast.parse(path.read_text(encoding="utf-8")))
        faces.update({(mod, k): v for k, v in _imported(trees[path][1], mod, top_only=True).items()})

    def resolve(key: tuple[str, str]) -> tuple[str, str]:
        for _ in range(10):
            if key in records or key not in faces:
                break
            key = faces[key]
        return key
    found = []
    for path, (mod, tree) in trees.items():
        imported = _imported(tree, mod)
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Call) and n.args):
                continue
            f, key = n.func, None
            if isinstance(f, ast.Name):
                key = imported.get(f.id, (mod, f.id))
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in imported:
                m, name = imported[f.value.id]
                key = (f"{m}.{name}" if name else m, f.attr)
            if key is not None and len(records.get(resolve(key), ())) > MOST_POSITIONAL_FIELDS:
                found.append(f"{path.relative_to(src).as_posix()}:{n.lineno}: {key[1]}(...) with {len(n.args)} "
                             "positional argument(s)")
    return found


def test_the_record_check_sees_a_positional_build(tmp_path: Path):
    pkg = tmp_path / "perfstack"
    (pkg / "profile" / "records").mkdir(parents=True)
    (pkg / "profile" / "records" / "__init__.py").write_text("from perfstack.profile.records.rows import Row\n")
    (pkg / "profile" / "records" / "rows.py").write_text(
        "@dataclass\nclass Base:\n    a: int\n    loaded: int = field(default=0, init=False)\n"
        "@dataclass\nclass Row(Base):\n    b: int\n    c: int\n    d: int\n    e: int\n    f: int = 0\n")
    (pkg / "profile" / "use.py").write_text(
        "from perfstack.profile.records import Row\nfrom perfstack.profile import records as r\n"
        "x = Row(1, 2, 3, 4, 5, 6)\ny = r.Row(a=1, b=2, c=3, d=4, e=5)\nz = r.Row(1, b=2, c=3, d=4, e=5)\n")
    assert record_fields(pkg)[("perfstack.profile.records.rows", "Row")] == ["a", "b", "c", "d", "e", "f"]
    assert [s.split(":")[1] for s in positional_record_calls(pkg)] == ["3", "5"]


def test_records_with_more_than_five_fields_are_built_by_keyword():
    """A positional build of a wide record reads as a row of values whose meaning is in another file, and a
    field added or moved in the record shifts every later value silently."""
    found = positional_record_calls()
    assert not found, "\n".join(found)
