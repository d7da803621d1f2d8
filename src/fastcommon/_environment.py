"""fastcommon's environment variables, each named once, how a flag is read, and the records setup.py leaves in the
package. It imports nothing of fastcommon's: setup.py reads this file too."""

import os

PURE_PYTHON = "FASTCOMMON_PURE_PYTHON"  # a flag: run the pure-Python implementation
REPORT = "FASTCOMMON_REPORT"  # set by run: "1", each process reports on stderr as it ends; REPORT_FULL, in full
REPORT_FULL = "full"
REPORT_FILE = "FASTCOMMON_REPORT_FILE"  # set by run --report-file: where each process appends its JSON line
COMPARE_RUN = "FASTCOMMON_COMPARE_RUN"  # set by compare: the path its run's files begin with (_recording.py)
COMPARE_PROCESSES = "FASTCOMMON_COMPARE_PROCESSES"  # set by compare: where each process that imports grpc records it
COMPARE_STOCK = "FASTCOMMON_COMPARE_STOCK"  # a flag, set by compare's stock runs: the bootstrap records, never patches
COMPARE_SEED = "FASTCOMMON_COMPARE_SEED"  # set by compare: pytest-randomly's seed, where the program gives none
COMPARE_PYTEST_PLUGINS = "FASTCOMMON_COMPARE_PYTEST_PLUGINS"  # set by compare: PYTEST_PLUGINS as it was given
NO_EXTENSIONS = "FASTCOMMON_NO_EXTENSIONS"  # a flag, at build time: pure Python on purpose
REQUIRE_EXTENSIONS = "FASTCOMMON_REQUIRE_EXTENSIONS"  # a flag, at build time and in the tests: no fallback
LIMITED_API = "FASTCOMMON_LIMITED_API"  # a flag, at build time: the Limited API of CPython 3.11 (the abi3 wheel)

BUILD_ERROR_FILE = "_extension_build_error.txt"  # in the package: why a compiled module failed to build
BUILT_WITHOUT_EXTENSIONS_FILE = "_built_without_extensions.txt"  # in the package: pure Python on purpose


def flag(name: str) -> bool:
    """Whether the variable ``name`` is set to anything but empty or 0."""
    return os.environ.get(name, "") not in ("", "0")
