"""Build fastcommon: the Cython extensions when it can (fast_common, fast_metadata, fast_hooks and fast_entry, the
last not for the Limited API; on POSIX also _sigterm, run --report's SIGTERM relay), pure Python when it cannot.

FASTCOMMON_NO_EXTENSIONS=1        build pure Python on purpose (no Cython, no compiler).
FASTCOMMON_REQUIRE_EXTENSIONS=1   a failed extension build, or an extension that does not import, is fatal
                                  (for CI and wheels).
FASTCOMMON_LIMITED_API=1          build for the Limited API of CPython 3.11: one abi3 wheel for every later
                                  CPython, the fallback where no per-version wheel exists yet.
Otherwise a failed compile leaves a pure-Python install, one warning banner, and a
record of the error that patch() turns into a runtime warning (pip hides build output);
a failed _sigterm alone, a warning from run --report that the relay is missing.
Both record files are read by fastcommon/_implementation.py.
"""

import os
import runpy
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

LIMITED_API_VERSION = (3, 11)  # the oldest CPython the abi3 wheel installs on
# fastcommon's variables, each named once, and how a flag is read (_environment.py imports nothing of the package)
ENVIRONMENT = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "src/fastcommon/_environment.py"))
flag = ENVIRONMENT["flag"]


PURE = "fastcommon is installed as pure Python (correct, but slower)."
LOST_WITHOUT = {  # what a failed build of each extension leaves out
    "fastcommon.fast_common": PURE,
    "fastcommon.fast_metadata": PURE,
    "fastcommon.fast_entry": PURE,
    "fastcommon.fast_hooks": PURE,
    "fastcommon._sigterm": "run --report's SIGTERM relay is missing: a process whose main thread waits with no "
    "timeout may not end when another thread takes SIGTERM (docs/adoption.md).",
}


class OptionalBuildExt(build_ext):
    """build_ext that turns a compiler failure into a pure-Python install."""

    def run(self):
        for ext in self.extensions:  # an earlier build's record is stale
            if os.path.exists(record := self.record(ext)):
                os.remove(record)
        super().run()

    def record(self, ext):
        return os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), ENVIRONMENT["BUILD_ERROR_FILE"])

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            if flag(ENVIRONMENT["REQUIRE_EXTENSIONS"]):
                raise
            message = f"{ext.name}: {type(exc).__name__}: {exc}"
            banner = "*" * 75
            print(
                f"{banner}\nWARNING: a fastcommon C extension could not be built:\n  {message}\n"
                f"{LOST_WITHOUT[ext.name]}\n"
                f"Install a C compiler and reinstall for the compiled version.\n{banner}",
                file=sys.stderr,
            )
            record = self.record(ext)
            os.makedirs(os.path.dirname(record), exist_ok=True)
            with open(record, "a", encoding="utf-8") as file:
                file.write(message + "\n")
        else:
            if flag(ENVIRONMENT["REQUIRE_EXTENSIONS"]):
                check_that_it_imports(ext.name, self.get_ext_fullpath(ext.name))


def check_that_it_imports(name, path):
    """Import the built extension in a fresh interpreter, from the package folder it was built into (not from an
    installed fastcommon): a module that compiles but does not import is an error."""
    code = (
        "import importlib, os, sys, types; "
        "package = sys.modules['fastcommon'] = types.ModuleType('fastcommon'); "
        "package.__path__ = [os.path.dirname(sys.argv[2])]; "
        "importlib.import_module(sys.argv[1])"
    )
    if subprocess.run([sys.executable, "-c", code, name, path]).returncode != 0:
        raise RuntimeError(f"the built extension {path} does not import (FASTCOMMON_REQUIRE_EXTENSIONS=1)")


class BuildPyRecordingPurpose(build_py):
    """build_py that marks a pure build made on purpose, so that patch() does not warn."""

    def run(self):
        super().run()
        if flag(ENVIRONMENT["NO_EXTENSIONS"]):
            with open(
                os.path.join(self.build_lib, "fastcommon", ENVIRONMENT["BUILT_WITHOUT_EXTENSIONS_FILE"]), "w"
            ) as file:
                file.write(f"{ENVIRONMENT['NO_EXTENSIONS']}=1\n")


def extensions():
    if flag(ENVIRONMENT["NO_EXTENSIONS"]):
        return []
    from Cython.Build import cythonize

    macros = []
    if flag(ENVIRONMENT["LIMITED_API"]):
        version = "0x{:02X}{:02X}0000".format(*LIMITED_API_VERSION)
        macros = [("Py_LIMITED_API", version), ("CYTHON_LIMITED_API", "1")]
    # What grpc calls: the conversions, grpc.aio's Metadata methods, grpc's hooks, the metadata entry constructor
    # (which writes a tuple in place: not in the Limited API). _sigterm: run --report's SIGTERM relay, POSIX only (a
    # C handler).
    names = ["fast_common", "fast_metadata", "fast_hooks", *([] if macros else ["fast_entry"])]
    names += ["_sigterm"] if os.name == "posix" else []
    extensions = [
        Extension(f"fastcommon.{name}", [f"fastcommon/{name}.pyx"], define_macros=macros, py_limited_api=bool(macros))
        for name in names
    ]
    # Cythonized from src/, so that tracebacks name fastcommon/fast_metadata.pyx: a path relative to the
    # package's parent, which linecache finds along sys.path, as the .pyx ships in the package. The generated
    # C goes to build/cython/ (with copies of the headers it includes), out of the source tree.
    here = os.getcwd()
    os.chdir("src")
    try:
        modules = cythonize(extensions, build_dir=os.path.join("..", "build", "cython"))
    finally:
        os.chdir(here)
    for module in modules:
        module.sources = [os.path.normpath(os.path.join("src", source)) for source in module.sources]
    return modules


def options():
    if flag(ENVIRONMENT["LIMITED_API"]) and not flag(ENVIRONMENT["NO_EXTENSIONS"]):
        # A build folder of its own: a per-version build's extensions left in build/lib.* would go into the abi3
        # wheel beside its own, and win at import (pip builds in the checkout).
        return {
            "bdist_wheel": {"py_limited_api": "cp{}{}".format(*LIMITED_API_VERSION)},
            "build": {"build_base": "build/abi3"},
        }
    return {}


setup(
    ext_modules=extensions(),
    options=options(),
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyRecordingPurpose},
)
