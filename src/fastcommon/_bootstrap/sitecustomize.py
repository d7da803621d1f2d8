"""fastcommon's bootstrap: `python -m fastcommon run` puts this directory first on PYTHONPATH.

Python runs this file at start-up in the program and in every Python process that inherits
that environment. It imports nothing: it asks the import system to hand grpc to fastcommon once
the process has imported grpc, then runs the program's own sitecustomize, if there is one.
It is written to do no harm under any Python: a child started with another interpreter, where
fastcommon cannot be imported, runs unpatched.
"""

import os
import sys

TYPE_CHECKING = False  # mypy reads it as true; Python never imports these: this file imports nothing
if TYPE_CHECKING:  # for the type comments, which ruff does not read
    from importlib.abc import Loader  # noqa: F401
    from importlib.machinery import ModuleSpec  # noqa: F401
    from types import ModuleType  # noqa: F401
    from typing import Optional, Sequence  # noqa: F401

_BOOTSTRAP_DIR = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))


def _adopt_grpc():
    # type: () -> None
    try:
        from fastcommon import _launcher
    except ImportError:  # another interpreter, or an environment without fastcommon: grpc stays as it is
        return
    _launcher.grpc_imported()


class _LoadThenAdopt(object):
    """grpc's own loader, which calls fastcommon once grpc has loaded."""

    def __init__(self, loader):
        # type: (Loader) -> None
        self.loader = loader

    def __getattr__(self, name):
        # type: (str) -> object
        return getattr(self.loader, name)

    def create_module(self, spec):
        # type: (ModuleSpec) -> Optional[ModuleType]
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # type: (ModuleType) -> None
        module.__loader__ = self.loader  # no trace of us on grpc, from its first line on
        module.__spec__.loader = self.loader  # type: ignore[union-attr]  # a spec is set before exec_module
        self.loader.exec_module(module)
        if _WATCHER in sys.meta_path:
            sys.meta_path.remove(_WATCHER)  # once grpc is in, later imports pay nothing
        _adopt_grpc()


class _GrpcWatcher(object):
    """A meta path finder that finds grpc as the other finders do, with a loader that calls fastcommon after."""

    def find_spec(self, fullname, path=None, target=None):
        # type: (str, Optional[Sequence[str]], Optional[ModuleType]) -> Optional[ModuleSpec]
        if fullname != "grpc":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and getattr(spec.loader, "exec_module", None) is not None:
                    spec.loader = _LoadThenAdopt(spec.loader)  # type: ignore[assignment]  # a Loader in all but name
                return spec
        return None


def _run_the_programs_own_sitecustomize():
    # type: () -> None
    """Import the next sitecustomize on sys.path, as site.py would have without this one."""
    this_one = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [entry for entry in sys.path if os.path.normcase(os.path.abspath(entry or ".")) != _BOOTSTRAP_DIR]
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401  (the program's own, further along sys.path)
    except ImportError as exc:
        if getattr(exc, "name", "sitecustomize") != "sitecustomize":
            raise  # their sitecustomize failed: site.py reports it as it would without us
        sys.modules["sitecustomize"] = this_one  # type: ignore[assignment]


_WATCHER = _GrpcWatcher()
if sys.version_info < (3, 9):
    pass  # fastcommon needs 3.9; older Pythons (Python 2 asks finders for find_module) are left alone
elif "grpc" in sys.modules:  # imported before site ran (an embedding application): adopt it now
    _adopt_grpc()
else:
    sys.meta_path.insert(0, _WATCHER)
_run_the_programs_own_sitecustomize()
