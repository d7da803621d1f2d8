"""The suite against an installed wheel: cibuildwheel's test-command (see [tool.cibuildwheel] in pyproject.toml).

    python tests/wheel_suite.py

It installs grpcio and grpcio-tools as wheels only. grpcio publishes none for free-threaded CPython
(3.13t, 3.14t) nor for every musllinux Python: there the suite runs without grpcio, as
FASTCOMMON_TESTS_WITHOUT_GRPCIO=1 (see tests/conftest.py), says so, and takes grpc's own code from grpcio's
source as its oracle (tests/grpc_source.py). The compiled module must load: FASTCOMMON_REQUIRE_EXTENSIONS=1.
"""

import os
import subprocess
import sys
import tempfile

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def main():
    have_grpcio = (
        subprocess.call([sys.executable, "-m", "pip", "install", "--only-binary=:all:", "grpcio", "grpcio-tools"]) == 0
    )
    environ = {**os.environ, "FASTCOMMON_REQUIRE_EXTENSIONS": "1"}
    if not have_grpcio:
        print("wheel_suite: grpcio has no wheel for this Python: the suite runs without it", flush=True)
        environ["FASTCOMMON_TESTS_WITHOUT_GRPCIO"] = "1"
        source = os.path.join(tempfile.mkdtemp(), "grpc")
        subprocess.check_call([sys.executable, os.path.join(TESTS_DIR, "grpc_source.py"), source])
        environ["FASTCOMMON_TESTS_GRPC_SOURCE"] = source  # grpc's own code, the oracle
        subprocess.call([sys.executable, "-m", "pip", "install", "--only-binary=:all:", "typing_extensions"])
    # From the project's top (its pyproject.toml configures pytest), where src/ layout keeps the source
    # package off sys.path: the tests import the installed wheel.
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", TESTS_DIR]
    return subprocess.call(command, cwd=os.path.dirname(TESTS_DIR), env=environ)


if __name__ == "__main__":
    sys.exit(main())
