"""Sphinx extension: the API reference pages (book/api/), generated from the package.

One directive, used once per page (a MyST ``.md`` page)::

    ```{api-package} candidate_sampling.losses
    ```

expands into a table of every public name of the package (its modules' ``__all__``, with
each name's first docstring line) followed by ``automodule`` of every public module in it,
members in source order. New modules appear without editing the page. For the top-level
package, ``candidate_sampling``, the modules are the top-level ones (``device``,
``candidates``, ``models``, ``train``, ...): each subpackage has its own page, and names the
package re-exports from a private module (``_validate``) are documented on the top-level
page.

At the end of the build every public name of every public module must have been
documented somewhere; a missing one is a warning, and ``-W`` makes it an error. With
``nitpicky`` on, so is every cross-reference in a docstring that points nowhere.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

LOGGER = logging.getLogger(__name__)
ROOT_PACKAGE = "candidate_sampling"


def public_modules(package: ModuleType) -> list[ModuleType]:
    """The package's public submodules that are not packages themselves, by name."""
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        found.append(importlib.import_module(f"{package.__name__}.{info.name}"))
    return found


def public_subpackages(package: ModuleType) -> list[str]:
    return sorted(
        f"{package.__name__}.{i.name}" for i in pkgutil.iter_modules(package.__path__)
        if i.ispkg and not i.name.startswith("_")
    )


def public_names(module: ModuleType) -> list[str]:
    """``__all__``, or else the functions and classes the module itself defines."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n for n, obj in vars(module).items()
            if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__
        ]
    return [n for n in names if not n.startswith("__")]


def data_names(module: ModuleType) -> list[str]:
    """Public names of a module that are neither classes, functions nor modules."""
    return [
        n for n in public_names(module)
        if not (isinstance(getattr(module, n, None), (type, ModuleType))
                or callable(getattr(module, n, None)))
    ]


def _defined_in_private_module(package: ModuleType) -> list[str]:
    """Names of ``package.__all__`` whose object lives in a private module (``_validate``)."""
    out = []
    for name in public_names(package):
        obj = getattr(package, name, None)
        origin = getattr(obj, "__module__", "") or ""
        if origin.startswith(package.__name__) and any(
            part.startswith("_") for part in origin.split(".")
        ):
            out.append(name)
    return out


class ApiPackage(SphinxDirective):
    """``{api-package} dotted.name``: the reference of one package (see module doc)."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        package = importlib.import_module(name)
        modules = public_modules(package)
        private = _defined_in_private_module(package)
        # MyST markdown (the pages are .md) around reStructuredText: autodoc writes reST,
        # so its directives go inside eval-rst blocks
        lines: list[str] = []
        rows = [f"{name}.{n}" for n in private]
        for module in modules:
            rows += [f"{module.__name__}.{n}" for n in public_names(module)]
        lines += ["```{eval-rst}"]
        if rows:  # first, while no current module is set (autosummary wants full names)
            lines += [".. autosummary::", "   :nosignatures:", ""]
            lines += [f"   ~{row}" for row in rows]
            lines += [""]
        lines += [f".. automodule:: {name}", "   :no-members:", ""]
        for n in private:
            kind = "autoclass" if isinstance(getattr(package, n), type) else "autofunction"
            lines += [f".. {kind}:: {name}.{n}", ""]
        lines += ["```", ""]
        for module in modules:
            data = data_names(module)
            lines += [f"## `{module.__name__}`", ""]
            lines += [
                "```{eval-rst}",
                f".. automodule:: {module.__name__}",
                "   :members:",
                "   :undoc-members:",
                "   :show-inheritance:",
            ]
            if data:
                lines += [f"   :exclude-members: {', '.join(data)}"]
            lines += [""]
            # module constants (tuples of allowed values, environment variable names):
            # autodoc takes a tuple for an imported object and skips it
            lines += [f".. autodata:: {module.__name__}.{n}\n" for n in data]
            lines += ["```", ""]
        self.env.note_dependency(package.__file__)
        for module in modules:
            self.env.note_dependency(module.__file__)
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=f"<api {name}>"), container)
        return container.children


def _check_every_name_documented(app, env) -> None:
    """Every public name of every public module of the package has an entry."""
    if "api_reference_checked" in env.temp_data:
        return
    objects = env.get_domain("py").objects
    if not any(k.startswith(ROOT_PACKAGE + ".") for k in objects):
        return  # no API page in this build (e.g. a partial build)
    root = importlib.import_module(ROOT_PACKAGE)
    packages = [root]
    for dotted in _all_subpackages(root):
        try:
            packages.append(importlib.import_module(dotted))
        except Exception as err:  # noqa: BLE001 - reported as a warning (-W: an error)
            LOGGER.warning(f"api_reference: cannot import {dotted}: {err}")
    missing = []
    for package in packages:
        try:
            modules = public_modules(package)
        except Exception as err:  # noqa: BLE001
            LOGGER.warning(f"api_reference: cannot import a module of {package.__name__}: {err}")
            continue
        for module in modules:
            for n in public_names(module):
                if f"{module.__name__}.{n}" not in objects:
                    missing.append(f"{module.__name__}.{n}")
        for n in _defined_in_private_module(package):
            if f"{package.__name__}.{n}" not in objects:
                missing.append(f"{package.__name__}.{n}")
    for name in missing:
        LOGGER.warning(f"api_reference: public name {name} is not documented on any page")


# |V| (the catalogue size) and |P(i)| are the book's notation, but reST reads |name| as a
# substitution. Outside inline literals, such a pair of bars is escaped before parsing.
_BARS = re.compile(r"(?<![\\\w|])\|([^\s|`][^|`\n]{0,30}?)\|(?![\w|])")
_LITERAL = re.compile(r"(``.+?``)", re.DOTALL)


def escape_bars(text: str) -> str:
    parts = _LITERAL.split(text)
    return "".join(
        part if i % 2 else _BARS.sub(r"\\|\1\\|", part) for i, part in enumerate(parts)
    )


def _escape_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    if not name.startswith(ROOT_PACKAGE):
        return
    lines[:] = escape_bars("\n".join(lines)).split("\n")


def _resolve_by_object(app, env, node, contnode):
    """A cross-reference to a name the package re-exports (``candidate_sampling.losses.
    in_batch_softmax_loss``) or imports (``KnownPairs`` in ``eval.metrics``) goes to the
    page where the object itself is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    objects = env.get_domain("py").objects
    candidates = []
    module = node.get("py:module") or ""
    for base in ([module] if module else []) + [""]:
        full = f"{base}.{target}" if base else target
        origin = _documented_name(full)
        if origin and origin in objects:
            candidates = [origin]
            break
    if not candidates and "." not in target:
        matches = {k for k in objects if k.startswith(ROOT_PACKAGE + ".") and
                   k.rsplit(".", 1)[-1] == target}
        if len(matches) == 1:
            candidates = list(matches)
    if not candidates:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node.get("reftype", "obj"), candidates[0], node,
        contnode,
    )


def _documented_name(dotted: str) -> str | None:
    """``module.qualname`` of the object a dotted name refers to, or None."""
    if not dotted.startswith(ROOT_PACKAGE):
        return None
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if module and qualname and not isinstance(obj, ModuleType):
            return f"{module}.{qualname}"
        return dotted
    return None


def _all_subpackages(package: ModuleType) -> list[str]:
    out = []
    for sub in public_subpackages(package):
        out.append(sub)
        out += _all_subpackages(importlib.import_module(sub))
    return out


def setup(app) -> dict:
    app.add_directive("api-package", ApiPackage)
    app.connect("env-check-consistency", _check_every_name_documented)
    app.connect("autodoc-process-docstring", _escape_docstring)
    app.connect("missing-reference", _resolve_by_object)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
