"""The shim picks an implementation truthfully and never fails to import because of its extension."""

import importlib.machinery
import os
import shutil
import sys

import helpers
import pytest
from conftest import load_implementation

import fastcommon

# What loaded, and why; then patch() twice: a compiled module that did not load is one warning, where grpc is patched.
REPORT = """
import fastcommon
print(fastcommon.IMPLEMENTATION)
print(fastcommon.PURE_PYTHON_REASON)
for _ in range(2):
    try:
        fastcommon.patch()
    except ImportError:  # without grpcio
        pass
"""


def run_python(code, *, env=None, pythonpath=None):
    """``code`` run with every warning shown, under none of fastcommon's variables but ``env``'s."""
    environ = dict.fromkeys(name for name in os.environ if name.startswith("FASTCOMMON_")) | (env or {})
    if pythonpath:
        environ["PYTHONPATH"] = pythonpath
    return helpers.python("-W", "always", "-c", code, env=environ)


def warnings_in(stderr):
    return stderr.count(": FastcommonWarning: ")  # the warning lines, not the source line shown under one


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the installed package that a test may break, with the compiled module's path."""
    loaded = os.path.basename(load_implementation("fast_common").__file__)
    source = os.path.dirname(fastcommon.__file__)
    target = tmp_path / "fastcommon"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "_*.txt"))
    suffix = loaded.removeprefix("fast_common")  # a checkout's editable installs build for each CPython, side by side
    for built in target.iterdir():
        if built.suffix in (".so", ".pyd") and not built.name.endswith(suffix):
            built.unlink()
    return target / loaded


def test_shim_exports_the_active_implementation():
    module = fastcommon.common if fastcommon.IMPLEMENTATION == "python" else fastcommon.fast_common
    for name in ("encode", "decode", "serialize", "deserialize"):
        assert getattr(fastcommon, name) is getattr(module, name)


def test_importing_fastcommon_loads_nothing_until_an_export_is_used():
    """`import fastcommon` loads no compiled module, gate, registry or grpc (each is loaded at first use, PEP 562);
    then every export answers as before."""
    code = "import sys, fastcommon; print(sorted(m for m in sys.modules if m.startswith(('fastcommon.', 'grpc'))))"
    assert helpers.python("-c", code, check_status=0).stdout == "[]\n"
    code = "import fastcommon; print([type(getattr(fastcommon, name)).__name__ for name in fastcommon.__all__])"
    exports = helpers.python("-c", code, check_status=0).stdout
    implementation, reason, *_ = exports.strip("[]\n").replace("'", "").split(", ")  # PURE_PYTHON_REASON: None, or why
    assert (implementation, reason) in {("str", "NoneType"), ("str", "str")} and exports.count("function") >= 4, exports
    assert "has no attribute 'nope'" in helpers.python("-c", "import fastcommon; fastcommon.nope").stderr
    code = "import fastcommon as f; print(set(f.__all__) <= set(dir(f)), hasattr(f, 'TYPE_CHECKING'))"
    assert helpers.python("-c", code, check_status=0).stdout == "True False\n"  # tab completion lists the exports


def test_the_submodules_the_docs_name_are_attributes_after_import_fastcommon_alone():
    """fastcommon.common (the pure-Python reference) and fastcommon.fast_common, as docs/safety.md names them, are
    attributes of the package after `import fastcommon`, as on 15142f3 (before the exports loaded at first use)."""
    code = "import fastcommon; print(fastcommon.common.__name__, fastcommon.fast_common.__name__)"
    result = helpers.python("-c", code)
    assert result.stdout == "fastcommon.common fastcommon.fast_common\n", result.stderr[-500:]


def test_a_type_checker_still_refuses_a_name_fastcommon_lacks(tmp_path):
    """The module's __getattr__ (PEP 562) is the runtime's: mypy, seeing it, would take `from fastcommon import pach`
    for an object and call `fastcommon.unpach()` an object that is not callable; on 15142f3 it said the name is none
    of fastcommon's."""
    pytest.importorskip("mypy")  # the wheel legs' venvs hold pytest and hypothesis alone
    (tmp_path / "use.py").write_text("import fastcommon\nfrom fastcommon import pach\n\nfastcommon.unpach()\n")
    result = helpers.python("-m", "mypy", "--no-incremental", "--strict", "use.py", cwd=tmp_path)
    assert 'Module "fastcommon" has no attribute "pach"' in result.stdout, result.stdout
    assert 'Module has no attribute "unpach"' in result.stdout, result.stdout


def test_compiled_module_is_chosen_when_it_imports():
    load_implementation("fast_common")
    result = run_python(REPORT)
    assert result.stdout.split("\n")[:2] == ["cython", "None"]
    assert warnings_in(result.stderr) == 0


@pytest.mark.parametrize("value, expected", [("1", "python"), ("yes", "python"), ("0", "cython"), ("", "cython")])
def test_pure_python_variable(value, expected):
    if expected == "cython":
        load_implementation("fast_common")
    result = run_python(REPORT, env={"FASTCOMMON_PURE_PYTHON": value})
    implementation, reason = result.stdout.split("\n")[:2]
    assert implementation == expected
    if expected == "python":
        assert reason == f"forced by FASTCOMMON_PURE_PYTHON={value}"
    assert warnings_in(result.stderr) == 0


def test_deleted_extension_warns_once_and_falls_back(package_copy):
    package_copy.unlink()
    result = run_python(REPORT, pythonpath=str(package_copy.parent.parent))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["python", "the extension is missing from the installation"]
    assert warnings_in(result.stderr) == 1


def test_garbage_extension_warns_once_and_falls_back(package_copy):
    package_copy.write_bytes(b"\x7fELF this is not a shared object")
    result = run_python(REPORT, pythonpath=str(package_copy.parent.parent))
    assert result.returncode == 0, result.stderr
    implementation, reason = result.stdout.split("\n")[:2]
    assert implementation == "python" and reason.startswith("the extension failed to import: ImportError")
    assert warnings_in(result.stderr) == 1


def test_extension_for_another_python_warns_once_and_falls_back(package_copy):
    other = "fast_common.cpython-38-x86_64-linux-gnu.so"
    assert other.split("fast_common", 1)[1] not in importlib.machinery.EXTENSION_SUFFIXES
    package_copy.rename(package_copy.with_name(other))
    result = run_python(REPORT, pythonpath=str(package_copy.parent.parent))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["python", f"the extension was built for another Python ({other})"]
    assert warnings_in(result.stderr) == 1


@pytest.mark.parametrize(
    "record, content, reason, warnings",
    [
        (
            "_extension_build_error.txt",
            "CompileError: no compiler",
            "the extension failed to build at install: CompileError: no compiler",
            1,
        ),
        (
            "_built_without_extensions.txt",
            "FASTCOMMON_NO_EXTENSIONS=1",
            "installed without extensions on purpose (FASTCOMMON_NO_EXTENSIONS=1)",
            0,
        ),
    ],
    ids=["failed build warns", "pure on purpose is quiet"],
)
def test_build_records_explain_a_missing_extension(package_copy, record, content, reason, warnings):
    package_copy.unlink()
    (package_copy.parent / record).write_text(content + "\n")
    result = run_python(REPORT, pythonpath=str(package_copy.parent.parent))
    assert result.stdout.split("\n")[:2] == ["python", reason]
    assert warnings_in(result.stderr) == warnings


def test_fallback_still_converts(package_copy):
    package_copy.write_bytes(b"garbage")
    code = (
        "import fastcommon; "
        "print(fastcommon.encode('h\\xe9'), fastcommon.decode(b'\\xff'), fastcommon.decode is fastcommon.common.decode)"
    )
    result = run_python(code, pythonpath=str(package_copy.parent.parent))
    assert result.stdout.strip() == "b'h\\xc3\\xa9' \ufffd True"


def test_info_command_reports_implementation_and_versions():
    try:
        import grpc
    except ImportError:  # FASTCOMMON_TESTS_WITHOUT_GRPCIO=1
        grpc_line = "grpcio: not installed"
    else:
        grpc_line = f"grpcio: {grpc.__version__}"
    for env, implementation in [({}, fastcommon.IMPLEMENTATION), ({"FASTCOMMON_PURE_PYTHON": "1"}, "python")]:
        result = helpers.python("-m", "fastcommon", env=env, check_status=0)
        lines = result.stdout.splitlines()
        assert lines[0] == f"fastcommon {fastcommon.__version__}"
        assert lines[1] == f"implementation: {implementation}"
        if env:
            assert lines[2] == "pure Python because: forced by FASTCOMMON_PURE_PYTHON=1"
        assert f"python: CPython {'.'.join(map(str, sys.version_info[:3]))}" in result.stdout
        assert any(line == grpc_line or line.startswith(grpc_line + " ") for line in lines)


TRACEBACK_THROUGH_FASTCOMMON = """
import logging, traceback, fastcommon
try:
    fastcommon.encode(1)  # an int has no encode(): raised inside fastcommon
except AttributeError:
    traceback.print_exc()
logging.basicConfig(format="%(message)s")
fastcommon.serialize(b"x", lambda message: 1 / 0)  # logged from inside fastcommon
"""


def test_a_traceback_through_fastcommon_names_files_that_exist_and_shows_their_lines(tmp_path):
    # From a directory unrelated to the checkout: paths must resolve as in an installed package.
    result = helpers.python("-c", TRACEBACK_THROUGH_FASTCOMMON, cwd=tmp_path)
    lines = result.stderr.splitlines()
    frames = [(i, line) for i, line in enumerate(lines) if "fastcommon" in line and line.startswith('  File "')]
    assert len(frames) >= 2, result.stderr  # one in each traceback
    for i, line in frames:
        path, lineno = line.split('"')[1], int(line.split(", line ")[1].split(",")[0])
        found = [os.path.join(entry, path) for entry in ["", *sys.path] if os.path.isfile(os.path.join(entry, path))]
        assert found, f"{path} is no file along sys.path"
        with open(found[0], encoding="utf-8") as file:
            assert lines[i + 1].strip() == file.read().splitlines()[lineno - 1].strip() != ""


@pytest.mark.skipif(sys.platform == "win32", reason="a Windows extension's file name carries no ABI tag")
def test_the_compiled_module_says_whether_it_is_the_abi3_build():
    compiled = load_implementation("fast_common")
    assert bool(compiled.LIMITED_API) == (".abi3" in os.path.basename(compiled.__file__))  # .abi3.so, .abi3-linux.so
