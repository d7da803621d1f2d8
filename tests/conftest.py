"""Every implementation test runs against fastcommon.common and fastcommon.fast_common; grpc's own objects are taken as
the oracle before any test patches grpc; and the fixtures the test files share (echo servers, a program run adopted)."""

import asyncio
import importlib
import math
import os
import sys
import textwrap

import hypothesis
import pytest

from fastcommon._environment import REQUIRE_EXTENSIONS as REQUIRE
from fastcommon._environment import flag

# The tests start subprocesses while grpc servers run in this process. grpcio's fork handlers then
# abort the child now and then (seen with grpcio 1.80 on CPython 3.9, whose subprocess forks rather
# than vforks), before it even execs; the tests never fork without exec, so they need no fork support.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

if sys.flags.dev_mode and hasattr(sys, "gettotalrefcount") and sys.version_info < (3, 12):
    # .ci/hardening's debug leg: asyncio's debug mode reports every callback slower than 0.1 s, and formats the
    # task it ran; for grpc's Cython coroutines that aborts CPython 3.11's debug build (PyCode_Addr2Line's
    # assertion; uvloop issue 574), with stock grpcio and no fastcommon (an aio handler that takes 0.3 s does it).
    # Debug mode's other checks stay on; only its slow-callback report is off.
    class _NoSlowCallbackReports(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self):
            loop = super().new_event_loop()
            loop.slow_callback_duration = math.inf
            return loop

    asyncio.set_event_loop_policy(_NoSlowCallbackReports())

# Where grpcio has no wheel (free-threaded CPython, some musllinux builds), cibuildwheel's test command and
# .ci/free-threaded run the suite without it, and say so with this variable: the tests that need grpc skip, and
# the oracle is grpc's own code taken from grpcio's source (tests/grpc_source.py), or, where none is given, the
# parity tests skip too: fastcommon is never compared with itself. Nowhere else.
WITHOUT_GRPCIO = flag("FASTCOMMON_TESTS_WITHOUT_GRPCIO")
try:
    from grpc import _common as _oracle_module
except ImportError:
    if not WITHOUT_GRPCIO:
        raise
    import grpc_source

    _oracle_module = grpc_source.common() if grpc_source.directory() else None
import helpers  # noqa: E402  (after grpc: under `python -m fastcommon run`, the adoption of this process comes first)

HAVE_GRPCIO = not WITHOUT_GRPCIO or "grpc" in sys.modules
NO_ORACLE = (
    "grpcio is not installed here, and no grpcio source is named (FASTCOMMON_TESTS_GRPC_SOURCE, tests/grpc_source.py):"
    " there is nothing but fastcommon itself to compare fastcommon with"
)

FUNCTIONS = ("encode", "decode", "serialize", "deserialize")  # what the tests expect, written out
METADATA_METHODS = (
    "Metadata.__init__", "Metadata.add", "Metadata.from_tuple", "Metadata._create", "Metadata.__iter__",
    "Metadata.__len__", "Metadata.__getitem__", "Metadata.get", "Metadata.get_all", "Metadata.__contains__",
    "Metadata.__setitem__", "_BaseMultiCallable._init_metadata",
)  # fmt: skip
HOOKS = ("get_plugin", "_get_running_loop", "_is_async_handler", "_create_servicer_context")  # grpc's hooks
if HAVE_GRPCIO:
    # grpc's own objects are the oracle, taken before any test can patch grpc. Under `python -m fastcommon
    # run -m pytest` grpc is patched as soon as it is imported; its own are then the ones fastcommon replaced.
    GRPC_ORACLE = {name: helpers.original(name) for name in FUNCTIONS}
    GRPC_METADATUM = helpers.original("_Metadatum")  # grpc's metadata entry class
    # grpc.aio's Metadata methods and _init_metadata, as their classes hold them; those this grpcio has.
    GRPC_METADATA_ORIGINALS = {name: own for name in METADATA_METHODS if (own := helpers.original(name)) is not None}
    GRPC_HOOKS = {name: own for name in HOOKS if (own := helpers.original(name)) is not None}  # those it has
    assert all(function.__module__ == "grpc._common" for function in GRPC_ORACLE.values()), GRPC_ORACLE
else:
    GRPC_ORACLE = None if _oracle_module is None else {name: getattr(_oracle_module, name) for name in FUNCTIONS}
    GRPC_METADATUM, GRPC_METADATA_ORIGINALS, GRPC_HOOKS = None, {}, {}  # for the modules that import them, then skip

# Under `python -m fastcommon run -m pytest`, this process is adopted by now (it has imported grpc), and every
# child would inherit the adoption (under compare, its records). The children the tests start are experiments with
# environments of their own: they start as under plain python.
for _variable in (helpers.REPORT_VARIABLE, *helpers.COMPARE_VARIABLES):
    os.environ.pop(_variable, None)
_PATHS = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path != helpers.BOOTSTRAP_DIR]
if any(_PATHS):
    os.environ["PYTHONPATH"] = os.pathsep.join(_PATHS)
else:
    os.environ.pop("PYTHONPATH", None)

NEEDS_GRPCIO = "grpcio is not installed here (FASTCOMMON_TESTS_WITHOUT_GRPCIO=1)"

hypothesis.settings.register_profile("dev", max_examples=300, deadline=None)
hypothesis.settings.register_profile("ci", max_examples=5000, deadline=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

REQUIRE_EXTENSIONS = flag(REQUIRE)


def abi3_build():
    """Whether the compiled module is a Limited API (abi3) build (on Windows its file name does not say)."""
    import fastcommon

    return fastcommon.IMPLEMENTATION == "cython" and bool(fastcommon.fast_common.LIMITED_API)


def expected_patch():
    """What patch() replaces on stock grpc, from the build's facts: the compiled module adds the metadata entry
    (not in a Limited API build, which cannot know a tuple's layout), and the Metadata methods and hooks this grpcio
    has."""
    import fastcommon

    if fastcommon.IMPLEMENTATION != "cython":
        return FUNCTIONS
    return (*FUNCTIONS, *(() if abi3_build() else ("_Metadatum",)), *GRPC_METADATA_ORIGINALS, *GRPC_HOOKS)


def pytest_report_header():
    import fastcommon

    oracle = "grpc._common" if HAVE_GRPCIO else "none" if GRPC_ORACLE is None else "grpc._common from grpcio's source"
    return (
        f"fastcommon {fastcommon.__version__} ({fastcommon.IMPLEMENTATION}) from {os.path.dirname(fastcommon.__file__)}"
        f"; oracle: {oracle}"
    )


def load_implementation(name):
    """Import fastcommon.<name>; skip (or, when the extension is required, fail) if it was not built."""
    try:
        return importlib.import_module(f"fastcommon.{name}")
    except ImportError as exc:
        if REQUIRE_EXTENSIONS:
            pytest.fail(f"FASTCOMMON_REQUIRE_EXTENSIONS is set but fastcommon.{name} did not import: {exc!r}")
        pytest.skip(f"fastcommon.{name} is not built here: {exc!r}")


@pytest.fixture(params=["common", "fast_common"], scope="session")
def impl(request):
    """fastcommon.common (pure Python) and fastcommon.fast_common (compiled), in turn."""
    return load_implementation(request.param)


@pytest.fixture(autouse=True)
def stock_grpc():
    """Each test starts with stock grpc and may not leave it patched; what it found (under `run`) is put back after."""
    import fastcommon

    with helpers.suspended():
        yield
        if fastcommon.is_patched():
            fastcommon.unpatch()
            pytest.fail("the test left grpc patched")


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """(echo_pb2, echo_pb2_grpc), generated by grpcio-tools from grpc_echo/echo.proto for this run."""
    from grpc_echo import generate_stubs

    return generate_stubs(str(tmp_path_factory.mktemp("stubs")))


@pytest.fixture(scope="session")
def server_address(stubs):
    from grpc_echo import echo_server

    with echo_server(*stubs) as address:
        yield address


@pytest.fixture
def channel(server_address):
    import grpc

    with grpc.insecure_channel(server_address) as channel:
        yield channel


# What a process says about itself, as one JSON line: its pid and whether grpc is patched in it.
SAY_PATCHED = """
def say_patched(label):
    import json, os, grpc, fastcommon
    from fastcommon._registry import NAMES
    names = [name for name in NAMES if fastcommon.is_patched(name)]
    return json.dumps({"label": label, "pid": os.getpid(), "patched": names})
"""


@pytest.fixture
def program(tmp_path):
    """Write a program (with say_patched defined) into tmp_path; returns a function that runs it, plainly or adopted."""

    def run(source, *args, fastcommon_run=True, report=False, env=None, name="app.py"):
        (tmp_path / name).write_text(SAY_PATCHED + textwrap.dedent(source))
        launcher = ["-m", "fastcommon", "run", *(["--report"] if report else [])] if fastcommon_run else []
        environ = {"PYTHONPATH": helpers.PROJECT_DIR, **(env or {})}
        return helpers.python(*launcher, name, *args, cwd=tmp_path, env=environ, check_status=0)

    return run
