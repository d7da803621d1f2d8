"""fastcommon's bootstrap, first on PYTHONPATH under `run` and compare, run at start-up in every process: it imports
nothing, hands grpc to fastcommon once imported, then runs the program's own sitecustomize; harmless on any Python."""

# mypy: allow-untyped-defs, allow-untyped-calls

import os
import sys

_BOOTSTRAP_DIR = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))


def _adopt_grpc():
    try:
        from fastcommon import _recording
    except ImportError:  # another interpreter, or an environment without fastcommon
        return
    _recording.grpc_imported()


class _LoadThenAdopt(object):
    """grpc's own loader, which calls fastcommon once grpc has loaded."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # create_module, and all else but exec_module: grpc's loader's
        return getattr(self.loader, name)

    def exec_module(self, module):
        module.__loader__ = self.loader  # no trace of us on grpc, from its first line on
        module.__spec__.loader = self.loader  # a spec is set before exec_module
        self.loader.exec_module(module)
        if _WATCHER in sys.meta_path:
            sys.meta_path.remove(_WATCHER)  # once grpc is in, later imports pay nothing
        _adopt_grpc()


class _GrpcWatcher(object):
    """A meta path finder that finds grpc as the other finders do, with a loader that calls fastcommon after."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "grpc":
            return None
        for finder in [each for each in sys.meta_path if each is not self and hasattr(each, "find_spec")]:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoadThenAdopt(spec.loader)  # type: ignore[assignment]  # a Loader in all but name
                return spec
        return None


_WATCHER = _GrpcWatcher()
if sys.version_info < (3, 10):
    pass  # fastcommon needs 3.10: an older Python (Python 2 asks finders for find_module) is left alone
elif "grpc" in sys.modules:  # imported before site ran (an embedding application): adopt it now
    _adopt_grpc()
else:
    sys.meta_path.insert(0, _WATCHER)

# Then the program's own sitecustomize, the next on sys.path, as site.py would have imported it without this one.
_THIS_ONE = sys.modules.pop("sitecustomize", None)
sys.path[:] = [entry for entry in sys.path if os.path.normcase(os.path.abspath(entry or ".")) != _BOOTSTRAP_DIR]
try:
    import sitecustomize  # type: ignore[import-not-found]  # noqa: F401
except ImportError as exc:
    if getattr(exc, "name", "sitecustomize") != "sitecustomize":
        raise  # their sitecustomize failed: site.py reports it as it would without us
    sys.modules["sitecustomize"] = _THIS_ONE  # type: ignore[assignment]
