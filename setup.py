"""Build fastcommon: the Cython extension when it can, pure Python when it cannot.

FASTCOMMON_NO_EXTENSIONS=1        build pure Python on purpose (no Cython, no compiler).
FASTCOMMON_REQUIRE_EXTENSIONS=1   a failed extension build is fatal (for CI and wheels).
Otherwise a failed compile leaves a pure-Python install, one warning banner, and a
record of the error that ``import fastcommon`` turns into a runtime warning (pip
hides build output). Both record files are read by fastcommon/__init__.py.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

BUILD_ERROR_FILE = "_extension_build_error.txt"
BUILT_WITHOUT_EXTENSIONS_FILE = "_built_without_extensions.txt"


def flag(name):
    return os.environ.get(name, "") not in ("", "0")


class OptionalBuildExt(build_ext):
    """build_ext that turns a compiler failure into a pure-Python install."""

    def build_extension(self, ext):
        record = os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), BUILD_ERROR_FILE)
        try:
            super().build_extension(ext)
        except Exception as exc:
            if flag("FASTCOMMON_REQUIRE_EXTENSIONS"):
                raise
            message = f"{type(exc).__name__}: {exc}"
            banner = "*" * 75
            print(
                f"{banner}\nWARNING: the fastcommon C extension could not be built:\n  {message}\n"
                "fastcommon is installed as pure Python (correct, but slower).\n"
                f"Install a C compiler and reinstall for the compiled version.\n{banner}",
                file=sys.stderr,
            )
            os.makedirs(os.path.dirname(record), exist_ok=True)
            with open(record, "w", encoding="utf-8") as file:
                file.write(message + "\n")
        else:
            if os.path.exists(record):
                os.remove(record)


class BuildPyRecordingPurpose(build_py):
    """build_py that marks a pure build made on purpose, so that import does not warn."""

    def run(self):
        super().run()
        if flag("FASTCOMMON_NO_EXTENSIONS"):
            with open(os.path.join(self.build_lib, "fastcommon", BUILT_WITHOUT_EXTENSIONS_FILE), "w") as file:
                file.write("FASTCOMMON_NO_EXTENSIONS=1\n")


def extensions():
    if flag("FASTCOMMON_NO_EXTENSIONS"):
        return []
    from Cython.Build import cythonize

    return cythonize([Extension("fastcommon.fast_common", ["src/fastcommon/fast_common.pyx"])])


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyRecordingPurpose})
