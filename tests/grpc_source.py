"""grpc's own pure-Python code, from grpcio's source, where grpcio cannot be installed (free-threaded CPython, some
musllinux builds): the oracle the tests compare fastcommon with there, never fastcommon's own code.

FASTCOMMON_TESTS_GRPC_SOURCE names the grpc package directory of grpcio's unpacked sdist
(grpcio-X.Y.Z/src/python/grpcio/grpc); ``python tests/grpc_source.py DIR`` fetches and unpacks it there, as
tests/wheel_suite.py and .ci/free-threaded do. Only what is pure Python and imports nothing of grpc's
core is taken: grpc._common's four functions, grpc.aio's Metadata, and its callables' _init_metadata.
"""

import ast
import glob
import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import types
import typing
import urllib.parse
import urllib.request

VARIABLE = "FASTCOMMON_TESTS_GRPC_SOURCE"


def directory():
    """The grpc package directory of grpcio's source, or None where none is named."""
    found = os.environ.get(VARIABLE, "")
    return found if found and os.path.isfile(os.path.join(found, "_common.py")) else None


def _definitions(path, names, namespace, inside=None):
    """Run the definitions of ``names`` in ``path`` (those of class ``inside``, undecorated) in ``namespace``."""
    with open(path, encoding="utf-8") as file:
        tree = ast.parse(file.read(), path)
    body = tree.body
    if inside is not None:
        body = next(node for node in body if isinstance(node, ast.ClassDef) and node.name == inside).body
    nodes = [node for node in body if isinstance(node, ast.FunctionDef) and node.name in names]
    for node in nodes:
        node.decorator_list = []
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)
    return {name: namespace[name] for name in names}


def common():
    """grpc._common's encode, decode, serialize and deserialize (and _transform), as a module of their own."""
    module = types.ModuleType("grpc._common")  # its logger's name, as grpc's
    module.__dict__.update(vars(typing), logging=logging, _LOGGER=logging.getLogger("grpc._common"))
    module.SerializingFunction = module.DeserializingFunction = typing.Callable[[typing.Any], typing.Any]
    names = ("encode", "decode", "_transform", "serialize", "deserialize")
    for function in _definitions(os.path.join(directory(), "_common.py"), names, module.__dict__).values():
        function.__module__ = module.__name__
    return module


def aio_metadata():
    """grpc/aio/_metadata.py, the whole module (it needs typing_extensions)."""
    path = os.path.join(directory(), "aio", "_metadata.py")
    module = types.ModuleType("grpc.aio._metadata")
    module.__file__ = path
    with open(path, encoding="utf-8") as file:
        exec(compile(file.read(), path, "exec"), module.__dict__)
    return module


def init_metadata(metadata_class):
    """_BaseMultiCallable._init_metadata of grpc/aio/_channel.py, whose Metadata is ``metadata_class``."""
    namespace = dict(vars(typing), Metadata=metadata_class, MetadataType=typing.Any)
    namespace["grpc"] = types.SimpleNamespace(Compression=typing.Any)
    path = os.path.join(directory(), "aio", "_channel.py")
    return _definitions(path, ("_init_metadata",), namespace, inside="_BaseMultiCallable")["_init_metadata"]


def fetch(into):
    """Download grpcio's sdist from PyPI (the newest release, or $GRPCIO_VERSION), check its digest, and unpack its
    grpc package into ``into``. (Not pip download: pip would build the sdist's metadata, which fails where
    grpcio does not build.)"""
    version = os.environ.get("GRPCIO_VERSION")
    where = f"https://pypi.org/pypi/grpcio/{version + '/' if version else ''}json"
    with urllib.request.urlopen(where) as answer:
        release = json.load(answer)
    [sdist] = [file for file in release["urls"] if file["packagetype"] == "sdist"]
    with tempfile.TemporaryDirectory() as downloads:
        archive_path = os.path.join(downloads, sdist["filename"])
        url = urllib.parse.urljoin(where, sdist["url"])  # a mirror of PyPI may give it relative
        with urllib.request.urlopen(url) as answer, open(archive_path, "wb") as file:
            shutil.copyfileobj(answer, file)
        with open(archive_path, "rb") as file:
            if hashlib.sha256(file.read()).hexdigest() != sdist["digests"]["sha256"]:
                raise RuntimeError(f"{sdist['filename']} does not match its sha256 on PyPI")
        with tarfile.open(archive_path) as archive:
            members = [m for m in archive.getmembers() if "/src/python/grpcio/grpc/" in m.name and m.isfile()]
            safely = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.12, and security releases
            archive.extractall(downloads, members=members, **safely)
        [package] = glob.glob(os.path.join(downloads, "grpcio-*", "src", "python", "grpcio", "grpc"))
        shutil.copytree(package, into, dirs_exist_ok=True)
    return into


if __name__ == "__main__":
    print(fetch(sys.argv[1]))
