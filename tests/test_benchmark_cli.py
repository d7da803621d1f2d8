"""benchmark.py as a person types it: its help leads with its own modes, and a bad results file is one line."""

import os
import subprocess
import sys

import pytest
from conftest import NEEDS_GRPCIO

pytest.importorskip("pyperf", reason="pyperf is a development requirement (requirements.txt), not a test one")
pytest.importorskip("grpc", reason=NEEDS_GRPCIO)  # the benchmarks time grpc

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark.py")


def benchmark(*args, cwd):
    return subprocess.run([sys.executable, BENCHMARK, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_leads_with_the_modes_then_pyperfs_options(tmp_path):
    result = benchmark("--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert text.startswith("usage: python benchmark.py [mode] [options]\n")
    modes = ["--fast", "--more-inputs", "--messages", "--rpc", "--plot DIR [results.json ...]", "--plot-format"]
    positions = [text.index(f"  {mode}") for mode in modes]
    assert max(positions) < text.index("pyperf's options") < text.index("--rigorous")


@pytest.mark.parametrize("content", [None, "not json", "{}"], ids=["missing", "not-json", "not-pyperf"])
def test_a_results_file_it_cannot_read_is_one_line_and_status_1(tmp_path, content):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    result = benchmark("--plot", str(tmp_path / "charts"), "results.json", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("python benchmark.py --plot: cannot read results.json: ")


def test_a_closed_pipe_ends_the_help_quietly(tmp_path):
    reader, writer = os.pipe()
    os.close(reader)  # as `python benchmark.py --help | head -1` once head has gone
    try:
        result = subprocess.run(
            [sys.executable, BENCHMARK, "--help"], cwd=tmp_path, stdout=writer, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (1, "")


def test_plot_without_matplotlib_names_an_install_that_keeps_an_editable_one(tmp_path):
    blocker = tmp_path / "no_matplotlib"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "results.json").write_text("{}")
    code = "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import plot; plot.pyplot()"
    result = subprocess.run(
        [sys.executable, "-c", code, os.path.dirname(BENCHMARK)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr == "--plot needs matplotlib, which is not installed: pip install matplotlib\n"


def test_rpc_instructions_without_valgrind_says_so_in_one_line(tmp_path):
    environ = {**os.environ, "PATH": str(tmp_path)}  # no valgrind on it
    result = subprocess.run(
        [sys.executable, BENCHMARK, "--rpc-instructions"], cwd=tmp_path, capture_output=True, text=True, env=environ,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "--rpc-instructions needs valgrind, which is not installed: apt-get install valgrind"
    )


# Two callgrind dumps of one process, as --dump-before writes them: names are compressed once per run, in the
# dump (and on the line, a function's or a call's) that first has them; a call's inclusive cost is not counted.
FIRST_DUMP = """\
events: Ir
ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) _PyEval_EvalFrameDefault
10 100
cob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6
cfn=(2) memcpy
calls=1 5
10 40
ob=(1)
fn=(3) PyDict_GetItem
20 7
"""
SECOND_DUMP = """\
events: Ir
ob=(1)
fl=(1)
fn=(1)
10 300
cob=(2)
cfn=(2)
calls=2 5
10 90
ob=(2)
fn=(2)
5 90
ob=(3) /site/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so
fn=(4) __pyx_f_cygrpc
1 11
+2 4
"""


def test_the_callgrind_dumps_are_read_with_names_from_earlier_dumps_and_calls_not_counted_twice(tmp_path):
    sys.path.insert(0, os.path.dirname(BENCHMARK))
    try:
        from benchmarks import rpc_instructions
    finally:
        sys.path.remove(os.path.dirname(BENCHMARK))
    names = {"ob": {}, "fn": {}}
    (tmp_path / "a").write_text(FIRST_DUMP)
    (tmp_path / "b").write_text(SECOND_DUMP)
    first = rpc_instructions.self_costs(str(tmp_path / "a"), "python3.11", names)
    second = rpc_instructions.self_costs(str(tmp_path / "b"), "python3.11", names)
    assert dict(first) == {"interpreter loop": 100, "rest of libpython": 7}
    assert dict(second) == {"interpreter loop": 300, "libc": 90, "grpc's extension": 15}
