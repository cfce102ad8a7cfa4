"""The public API documents itself: every public name has a docstring, and every
public callable that takes or returns tensors or arrays has a ``Shape:`` section.

Public names are the ``__all__`` of attnkit's packages and of the modules that
define attention variants, positions and decoding (following module objects
listed in an ``__all__``). The ``Shape:`` rule applies to:

* a function whose signature mentions ``Tensor``, ``ndarray`` or ``Array``
  (parameters or return annotation), and every function of :mod:`attnkit.viz`
  (which types its array inputs as ``Any``);
* a class whose constructor, ``forward``/``__call__`` or public methods
  mention them; the section may sit in the class docstring or in
  ``forward``/``__call__``.

``SHAPE_EXEMPT`` lists the names the rule does not fit, with the reason.
``SHAPE_MISSING`` lists the names that still lack a section: the test fails
when one of them gains it (shrink the list) or when any other name lacks it.

Data names (constants) are checked through griffe, which reads the docstring
written under an assignment, as the API pages show it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PACKAGES = ["attnkit", "attnkit.core", "attnkit.layers", "attnkit.blocks", "attnkit.models", "attnkit.reference",
            "attnkit.data", "attnkit.train", "attnkit.viz", "attnkit.inspect", "attnkit.parallel"]
EXTRA_MODULES = ["attnkit.core.dispatch", "attnkit.core.types", "attnkit.core.block_mask",
                 "attnkit.core.score_mods", "attnkit.core.kernels.tiles", "attnkit.positional",
                 "attnkit.decoding", "attnkit.models.seq2seq",
                 "attnkit.models.captioning", "attnkit.models.visual", "attnkit.data.shapes",
                 "attnkit.data.captions", "attnkit.data.parallel", "attnkit.inspect.torch_nn",
                 "attnkit.inspect.hf", "attnkit.inspect.timm_attention", "attnkit.inspect.own_layers",
                 "attnkit.inspect.sources", "attnkit.viz.neuron", "attnkit.viz.notebook"]

SHAPE_EXEMPT: dict[str, str] = {
    "attnkit.core.dispatch.choose_backend":
        "takes attention()'s arguments, whose Shape section applies; returns a BackendChoice",
    "attnkit.core.masks.combine": "shape-generic: returns the broadcast of the given masks",
    "attnkit.core.masks.to_additive": "element-wise: the bias has the mask's shape",
    "attnkit.core.masks.check_mask": "validator: the target shape is an argument",
    "attnkit.core.masks.check_bias": "validator: the target shape is an argument",
    "attnkit.reference.layers.ReLU": "element-wise: output shape = input shape",
    "attnkit.reference.layers.GELU": "element-wise: output shape = input shape",
    "attnkit.reference.layers.Dropout": "element-wise: output shape = input shape",
    "attnkit.reference.module.Module": "abstract base class; each layer documents its shapes",
    "attnkit.reference.checking.gradcheck": "shape-generic: checks parameters of any shape",
    "attnkit.reference.checking.module_gradcheck": "shape-generic: checks parameters of any shape",
    "attnkit.layers.bert.hf_attention_state_dict": "renames parameter tensors; their shapes are unchanged",
}

# Public names still without a Shape section (to be written by their owners).
SHAPE_MISSING: set[str] = set()

# Public constants still without a docstring under their assignment.
# Names bound by tuple unpacking (``PAD, BOS = ...``) have no place for one: bind them one per line.
CONSTANT_MISSING: set[str] = set()

ARRAY_WORDS = re.compile(r"\b(Tensor|ndarray|NDArray|Array|ArrayLike)\b")
SHAPE_SECTION = re.compile(r"^\s*Shape:", re.MULTILINE)


def _modules() -> list[str]:
    layers = importlib.import_module("attnkit.layers")
    layer_modules = sorted(m.name for m in pkgutil.iter_modules(layers.__path__, "attnkit.layers."))
    names = [*PACKAGES, *layer_modules]
    for extra in EXTRA_MODULES:
        try:
            importlib.import_module(extra)
        except ModuleNotFoundError:
            continue  # a module not written yet has no public names to check
        names.append(extra)
    return names


def _public(module_name: str) -> Iterator[tuple[str, str, Any]]:
    """(module, name, object) for each name in the module's ``__all__``, following submodules."""
    module = importlib.import_module(module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        yield module_name, name, obj
        if isinstance(obj, ModuleType) and obj.__name__.startswith("attnkit.") and hasattr(obj, "__all__"):
            yield from _public(obj.__name__)


def _definitions() -> dict[str, Any]:
    """Each public class or function once, by its defining path."""
    found: dict[str, Any] = {}
    for module_name in _modules():
        for _, _, obj in _public(module_name):
            if inspect.isclass(obj) or inspect.isfunction(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return found


def _signature_text(fn: Any) -> str:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    return " ".join([*(str(p.annotation) for p in signature.parameters.values()),
                     str(signature.return_annotation)])


def involves_arrays(obj: Any) -> bool:
    """The rule: does this public callable take or return tensors or arrays?"""
    if inspect.isfunction(obj):
        return bool(ARRAY_WORDS.search(_signature_text(obj))) or obj.__module__.startswith("attnkit.viz.")
    texts = [_signature_text(obj)]
    texts += [_signature_text(member) for name, member in vars(obj).items()
              if inspect.isfunction(member) and (not name.startswith("_") or name == "__call__")]
    return bool(ARRAY_WORDS.search(" ".join(texts)))


def has_shape_section(obj: Any) -> bool:
    docs = [obj.__doc__ or ""]
    if inspect.isclass(obj):
        docs += [getattr(vars(obj).get(m), "__doc__", None) or "" for m in ("forward", "__call__")]
    return any(SHAPE_SECTION.search(d) for d in docs)


def test_every_package_declares_its_public_names() -> None:
    for module_name in _modules():
        module = importlib.import_module(module_name)
        assert isinstance(getattr(module, "__all__", None), list | tuple), f"{module_name} has no __all__"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{module_name}.__all__ names missing attributes: {missing}"


def test_every_public_class_and_function_has_a_docstring() -> None:
    undocumented = sorted(path for path, obj in _definitions().items() if not (obj.__doc__ or "").strip())
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_every_public_module_has_a_docstring() -> None:
    for module_name in _modules():
        assert (importlib.import_module(module_name).__doc__ or "").strip(), f"{module_name} has no docstring"


def test_every_public_constant_has_a_docstring() -> None:
    griffe = pytest.importorskip("griffe")
    package = griffe.load("attnkit", resolve_aliases=False)
    undocumented = []
    for module_name in _modules():
        for owner, name, obj in _public(module_name):
            if isinstance(obj, ModuleType) or inspect.isclass(obj) or callable(obj) or name.startswith("__"):
                continue
            try:
                node = package[(*owner.split(".")[1:], name)]
                target = node.final_target if node.is_alias else node
            except (KeyError, griffe.AliasResolutionError):
                target = None  # e.g. assigned by tuple unpacking: no place for a docstring
            if target is None or target.docstring is None or not target.docstring.value.strip():
                undocumented.append(f"{owner}.{name}")
    undocumented = sorted(set(undocumented))
    unexpected = sorted(set(undocumented) - CONSTANT_MISSING)
    fixed = sorted(CONSTANT_MISSING - set(undocumented))
    assert not unexpected, f"public constants without a docstring under their own assignment: {unexpected}"
    assert not fixed, f"these constants are now documented (or gone); remove them from CONSTANT_MISSING: {fixed}"


def test_callables_with_tensors_have_a_shape_section() -> None:
    definitions = _definitions()
    lacking = sorted(path for path, obj in definitions.items()
                     if path not in SHAPE_EXEMPT and involves_arrays(obj) and not has_shape_section(obj))
    unexpected = sorted(set(lacking) - SHAPE_MISSING)
    fixed = sorted(SHAPE_MISSING - set(lacking))
    assert not unexpected, f"public callables with tensors/arrays but no 'Shape:' section: {unexpected}"
    assert not fixed, f"these now have a 'Shape:' section (or are gone); remove them from SHAPE_MISSING: {fixed}"


def test_exemptions_are_current() -> None:
    definitions = _definitions()
    stale = sorted(p for p in SHAPE_EXEMPT if p not in definitions)
    assert not stale, f"SHAPE_EXEMPT names that are no longer public: {stale}"
    needless = sorted(p for p in SHAPE_EXEMPT
                      if not involves_arrays(definitions[p]) or has_shape_section(definitions[p]))
    assert not needless, f"SHAPE_EXEMPT names the rule no longer flags: {needless}"


def test_the_rule_can_fail() -> None:
    """Negative controls: the checks flag what they are meant to flag."""

    def undocumented_tensor_function(x):  # type: ignore[no-untyped-def]
        """Doubles x."""
        return 2 * x

    undocumented_tensor_function.__annotations__ = {"x": "Tensor", "return": "Tensor"}
    assert involves_arrays(undocumented_tensor_function)
    assert not has_shape_section(undocumented_tensor_function)

    def documented(x: int) -> int:
        """Doubles x.

        Shape:
            x ``(B, T)``.
        """
        return x

    assert has_shape_section(documented)
    assert not involves_arrays(documented)


def test_every_command_is_documented() -> None:
    """docs/cli.md has a section for each command the ``attnkit`` group lists (a task's own commands too)."""
    from pathlib import Path

    import click

    from attnkit.cli import cli

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in cli.list_commands(click.Context(cli)) if f"## attnkit {name}" not in page]
    assert not missing, f"commands without a section in docs/cli.md: {missing}"


# --- the README's "What is inside" table ----------------------------------------------------------

README = "README.md"
# Names the table mentions that attnkit calls but does not define: name -> the module that does.
EXTERNAL_NAMES = {"scaled_dot_product_attention": "torch.nn.functional"}
_CODE = re.compile(r"`([^`]+)`")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\(\))?")


def readme_inside_table(text: str) -> list[tuple[str, str, str]]:
    """(part, where, what) for each row of the table under ``## What is inside``."""
    section = text.split("## What is inside", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert cells and cells[0] == ["part", "where", "what"], f"unexpected table header: {cells[:1]}"
    return [(c[0], c[1], c[2]) for c in cells[2:]]


def _where(cell: str) -> tuple[list[ModuleType], bool]:
    """The modules a row's ``where`` names (a function such as ``attnkit.attention`` stands for its
    package) and whether it names the ``attnkit`` command line."""
    modules = []
    for target in _CODE.findall(cell):
        try:
            modules.append(importlib.import_module(target))
        except ModuleNotFoundError:
            package, _, attr = target.rpartition(".")
            module = importlib.import_module(package)
            assert hasattr(module, attr), f"README names {target}, which is neither a module nor in {package}"
            modules.append(module)
    return modules, bool(re.search(r"`attnkit` CLI", cell))


def _commands() -> set[str]:
    import click

    from attnkit.cli import cli

    return set(cli.list_commands(click.Context(cli)))


def unlisted_names(rows: list[tuple[str, str, str]]) -> tuple[list[str], int]:
    """Names in the ``what`` cells that their row's modules do not provide, and how many were checked.

    A name resolves when it is importable from one of the row's modules, is a
    method of a class one of them exports (``from_torch``), is an ``attnkit``
    command (rows that name the CLI), or is listed in ``EXTERNAL_NAMES``.
    """
    missing, checked = [], 0
    for part, where, what in rows:
        modules, cli_row = _where(where)
        for code in _CODE.findall(what):
            if not _IDENTIFIER.fullmatch(code):
                continue
            name = code.removesuffix("()")
            checked += 1
            if any(hasattr(m, name) for m in modules):
                continue
            classes = [getattr(m, n, None) for m in modules for n in getattr(m, "__all__", ())]
            if any(inspect.isclass(c) and hasattr(c, name) for c in classes):
                continue
            if cli_row and name in _commands():
                continue
            if name in EXTERNAL_NAMES and hasattr(importlib.import_module(EXTERNAL_NAMES[name]), name):
                continue
            missing.append(f"{part}: {name} (from {where})")
    return missing, checked


def test_readme_inside_table_names_are_importable() -> None:
    """Every name the README lists under a module can be imported from that module."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / README).read_text(encoding="utf-8")
    rows = readme_inside_table(text)
    missing, checked = unlisted_names(rows)
    assert not missing, f"README 'What is inside' lists names its modules do not provide: {missing}"
    assert checked >= 30, f"only {checked} names found in the README table: did its layout change?"


def test_readme_table_check_can_fail() -> None:
    rows = [("models", "`attnkit.models`", "`DocumentClassifier`, `NoSuchModel`"),
            ("pipeline", "`attnkit.data` CLI", "`train`")]
    missing, checked = unlisted_names(rows)
    assert checked == 3
    assert missing == ["models: NoSuchModel (from `attnkit.models`)", "pipeline: train (from `attnkit.data` CLI)"]


def test_the_core_package_has_a_name_of_its_own() -> None:
    """The core is the package ``attnkit.core``; ``attnkit.attention`` is plainly the function (no module swapping),
    every module of the core imports by its path, and the short names re-export the core's modules' names."""
    import attnkit
    import attnkit.core.masks as core_masks
    from attnkit.core import dispatch, functional, masks, score_mods
    from attnkit.core.kernels import tiles

    assert tiles.__name__ == "attnkit.core.kernels.tiles" and core_masks is masks
    from attnkit import attention

    assert attention is functional.attention and attnkit.attention is functional.attention
    assert type(attnkit) is type(importlib) and callable(attnkit.attention)
    for short, core in ((attnkit.masks, masks), (attnkit.score_mods, score_mods), (attnkit.functional, functional)):
        assert all(getattr(short, name) is getattr(core, name) for name in core.__all__)
        assert short.__all__ == core.__all__
    assert attnkit.masks.read_mask is masks.read_mask
    assert importlib.import_module("attnkit.masks").causal is masks.causal
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("attnkit.attention.masks")
    assert attnkit.BackendChoice is dispatch.BackendChoice and attnkit.last_backend is dispatch.last_backend


def test_every_top_level_name_is_on_an_api_page() -> None:
    """Each name ``import attnkit`` offers is rendered by a ``::: module`` line of docs/api/*.md (its defining
    module, or the name itself)."""
    import attnkit

    root = Path(__file__).resolve().parents[2]
    pages = "\n".join(page.read_text(encoding="utf-8") for page in sorted((root / "docs" / "api").glob("*.md")))
    rendered = set(re.findall(r"^::: (\S+)\s*$", pages, flags=re.M))
    missing = []
    for name, module in attnkit._EXPORTS.items():
        defined_in = getattr(getattr(attnkit, name), "__module__", module)
        if not {defined_in, f"{defined_in}.{name}", f"{module}.{name}"} & rendered:
            missing.append(f"{name} ({defined_in})")
    assert not missing, f"not on any API page (docs/api/*.md): {missing}"
