"""reprobuild verify --local: what the image venv's .pth line does, for any interpreter
started with this directory on PYTHONPATH: run the runtime's start-up hook.

Package data, not a module of reprobuild: ``verify --local`` copies this file into each
verification's scratch directory as ``sitecustomize.py``."""

import reprobuild_entrypoint._startup  # noqa: F401


def _chain() -> None:
    # Run the sitecustomize this one shadows, if any (some distributions ship one).
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
del _chain
