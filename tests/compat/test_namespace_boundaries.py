"""octopt.bnb and octopt.torchao compose octopt.torch's CoreBinding (python/octopt/torch/binding.py) and reach
no private attribute of octopt.torch (issue 22, item 3; CONVENTIONS 20). Read from the sources (AST) and
from the classes, so that a new shortcut into octopt.torch's internals fails here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import octopt.bnb.optim as obnb_optim  # noqa: E402
import octopt.torch as ot  # noqa: E402
import octopt.torchao.optim as otao_optim  # noqa: E402

PKG = Path(ot.__file__).resolve().parent.parent
NAMESPACES = {"bnb": PKG / "bnb", "torchao": PKG / "torchao"}
# what the other namespaces may import from octopt.torch: its public names and the binding's
ALLOWED_MODULES = {"octopt.torch", "octopt.torch.binding"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sources(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _defined(files: list[Path]) -> set[str]:
    """Private names a set of modules defines: class attributes and methods, ``self._x = ...``, module names."""
    out: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                out.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
            elif isinstance(node, ast.alias):
                out.add((node.asname or node.name).split(".")[0])
    return {n for n in out if _private(n)}


def _absolute(f: Path, node: ast.ImportFrom) -> str:
    parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
    base = parts[: len(parts) - node.level] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
def test_imports_from_octopt_torch_are_public(namespace):
    bad = []
    for f in _sources(NAMESPACES[namespace]):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(f, node)
                if module == "octopt.torch" or module.startswith("octopt.torch."):
                    names = [a.name for a in node.names]
                    if module not in ALLOWED_MODULES or any(_private(n) for n in names):
                        bad.append(f"{f.name}:{node.lineno}: from {module} import {', '.join(names)}")
            elif isinstance(node, ast.Import):
                bad += [
                    f"{f.name}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("octopt.torch.")
                ]
    assert not bad, bad


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
def test_no_private_attribute_of_octopt_torch_is_read(namespace):
    """Every ``x._name`` in the namespace names something the namespace defines itself, never something that
    only octopt.torch defines (its optimizers', binding's or views' private attributes)."""
    torch_private = _defined(_sources(PKG / "torch"))
    files = _sources(NAMESPACES[namespace])
    own = _defined(files)
    bad = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in torch_private and node.attr not in own:
                bad.append(f"{f.name}:{node.lineno}: .{node.attr}")
            # by name: getattr(opt, "_x"), or a type(...) dict that sets one
            if isinstance(node, ast.Constant) and node.value in torch_private and node.value not in own:
                bad.append(f"{f.name}:{node.lineno}: {node.value!r}")
    assert not bad, bad


# what TorchOptimizer.__init_subclass__ records from the class keywords core, default_bits and param_rule
SUBCLASS_KEYWORDS = {"_core_base", "_default_bits", "_param_rule"}


def _in_octopt_torch(cls: type) -> bool:
    return cls.__module__ == "octopt.torch" or cls.__module__.startswith("octopt.torch.")


def _classes(module) -> list[type]:
    return [c for c in vars(module).values() if inspect.isclass(c) and c.__module__.startswith("octopt.")]


@pytest.mark.parametrize("module", [obnb_optim, otao_optim], ids=["bnb", "torchao"])
def test_no_class_sets_or_overrides_a_private_attribute_of_octopt_torch(module):
    """A subclass of an octopt.torch class is configured through its class keywords (core, default_bits,
    param_rule), never by setting or overriding the base's private attributes."""
    bad = []
    for cls in _classes(module):
        torch_bases = [b for b in cls.__mro__ if _in_octopt_torch(b)]
        theirs = {n for b in torch_bases for n in vars(b) if _private(n)} - SUBCLASS_KEYWORDS
        for c in cls.__mro__:
            if c in torch_bases or not c.__module__.startswith("octopt."):
                continue
            bad += [f"{c.__name__}.{n}" for n in vars(c) if n in theirs]
    assert not bad, bad


def test_bnb_composes_the_binding_instead_of_subclassing():
    assert not issubclass(obnb_optim.BnbOptimizer, ot.TorchOptimizer)
    opt = obnb_optim.Adam8bit([torch.nn.Parameter(torch.zeros(8))])
    assert "_binding" not in vars(opt)  # none of octopt.torch's attributes is re-created
