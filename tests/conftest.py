"""Every implementation test runs against fastcommon.common and fastcommon.fast_common."""

import importlib
import os

import hypothesis
import pytest

# Taken before any test can patch grpc: the installed grpc._common's own functions are the oracle.
from grpc import _common as _grpc_common

GRPC_ORACLE = {name: getattr(_grpc_common, name) for name in ("encode", "decode", "serialize", "deserialize")}

hypothesis.settings.register_profile("dev", max_examples=300, deadline=None)
hypothesis.settings.register_profile("ci", max_examples=3000, deadline=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

REQUIRE_EXTENSIONS = os.environ.get("FASTCOMMON_REQUIRE_EXTENSIONS", "") not in ("", "0")


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
def grpc_left_unpatched():
    """No test may leave grpc patched behind it."""
    yield
    import fastcommon

    if fastcommon.is_patched():
        fastcommon.unpatch()
        pytest.fail("the test left grpc._common patched")
