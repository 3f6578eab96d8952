"""Run a callback when a top-level module has finished importing, without importing it.

A finder placed first on ``sys.meta_path`` answers only for the watched top-level names (one
dict lookup for every other import). For those it asks the finders after it for the real spec
and wraps the spec's loader so that ``exec_module`` runs the real loader and then the callback.
Before the real loader runs, the module's ``__loader__`` and ``__spec__.loader`` are put back to
the real loader, so nothing downstream (``importlib.resources``, pickling, reloads) ever sees
the wrapper. The same technique as wrapt's post-import hooks.

Callbacks run only when the module is completely imported: when one watched module imports
another while it initialises (torch imports numpy, tensorflow imports keras), the inner
callback waits until the outermost watched import has finished, then the callbacks run in the
order the modules completed. A callback that imports a watched module itself gets that
module's callback after its own. The bookkeeping is per thread, and a module that failed to
import gets no callback. Exceptions from a callback propagate out of the ``import`` statement
(the caller decides which callbacks may raise).
"""

from __future__ import annotations

import sys
from _thread import _local

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    Callback = Callable[[str, ModuleType], None]


class _ThreadState(_local):
    def __init__(self) -> None:
        self.depth = 0
        self.draining = False
        self.pending: list[str] = []


class PostImportFinder:
    """A ``sys.meta_path`` finder that calls ``callbacks[name](name, module)`` after import."""

    def __init__(self, callbacks: Mapping[str, Callback]) -> None:
        self.callbacks = dict(callbacks)
        self._searching: set[str] = set()
        self._thread = _ThreadState()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if path is not None or fullname not in self.callbacks or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec = self._find_real_spec(fullname, target)
        finally:
            self._searching.discard(fullname)
        if spec is None:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(loader, fullname, self)  # type: ignore[assignment]
        return spec

    def _find_real_spec(self, fullname: str, target: ModuleType | None) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec: ModuleSpec | None = find_spec(fullname, None, target)
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        """Part of the finder protocol; nothing is cached here."""

    def completed(self, name: str) -> None:
        """``name`` finished importing (or was already imported when we were installed)."""
        state = self._thread
        state.pending.append(name)
        if state.depth == 0 and not state.draining:
            self._drain()

    def _drain(self) -> None:
        state = self._thread
        state.draining = True
        try:
            while state.pending:
                name = state.pending.pop(0)
                module = sys.modules.get(name)
                if module is not None:
                    self.callbacks[name](name, module)
        finally:
            state.draining = False


class _HookedLoader:
    """Delegates to the real loader; only ``exec_module`` is extended."""

    def __init__(self, loader: Loader, name: str, finder: PostImportFinder) -> None:
        self._loader = loader
        self._name = name
        self._finder = finder

    def __getattr__(self, attr: str) -> object:
        return getattr(self._loader, attr)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        state = self._finder._thread
        state.depth += 1
        try:
            self._loader.exec_module(module)
        finally:
            state.depth -= 1
        self._finder.completed(self._name)


def install(callbacks: Mapping[str, Callback]) -> PostImportFinder:
    """Put a finder first on ``sys.meta_path``; modules already imported get their callback
    now (in the order given)."""
    finder = PostImportFinder(callbacks)
    sys.meta_path.insert(0, finder)
    for name in finder.callbacks:
        if name in sys.modules:
            finder.completed(name)
    return finder


def uninstall(finder: PostImportFinder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
