"""benchmark.py as a person types it: its help leads with its own modes, and a bad results file is one line."""

import importlib
import json
import math
import os
import re
import subprocess
import sys

import pytest
from conftest import NEEDS_GRPCIO

pytest.importorskip("pyperf", reason="pyperf is a development requirement (requirements.txt), not a test one")
pytest.importorskip("grpc", reason=NEEDS_GRPCIO)  # the benchmarks time grpc

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark.py")


PLOT_NEEDS_MATPLOTLIB = "--plot needs matplotlib, which is not installed: pip install matplotlib"


def benchmark(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, BENCHMARK, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


def without(tmp_path, *modules):
    """An environment where importing these modules fails, as if they were not installed."""
    blocker = tmp_path / "blocked_modules"
    blocker.mkdir(exist_ok=True)
    for module in modules:
        (blocker / f"{module}.py").write_text(f"raise ImportError('{module} is blocked for this test')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}


# Every run starts by generating the echo stubs with grpc_tools: without it, a run that should have stopped
# before it started fails at once rather than running for minutes.
def without_matplotlib_or_a_run(tmp_path):
    return without(tmp_path, "matplotlib", "grpc_tools")


def benchmarks_module(name):
    sys.path.insert(0, os.path.dirname(BENCHMARK))
    try:
        return importlib.import_module(f"benchmarks.{name}")
    finally:
        sys.path.remove(os.path.dirname(BENCHMARK))


def test_help_leads_with_the_modes_then_pyperfs_options(tmp_path):
    result = benchmark("--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert text.startswith("usage: python benchmark.py [mode] [options]\n")
    modes = ["--fast", "--more-inputs", "--messages", "--rpc", "--plot DIR [results.json ...]", "--plot-format"]
    positions = [text.index(f"  {mode}") for mode in modes]
    assert max(positions) < text.index("pyperf's options") < text.index("--rigorous")


def test_help_gives_no_duration_for_fast_that_a_slower_machine_would_make_untrue(tmp_path):
    text = benchmark("--help", cwd=tmp_path).stdout
    fast = [line for line in text.splitlines() if "--fast" in line]
    assert len(fast) == 3  # the mode, the example (the module's docstring) and pyperf's option
    assert not [line for line in fast if re.search(r"\d|minute|second", line)]


@pytest.mark.parametrize(
    "args",
    [
        ["--rpc", "--rounds", "0"],
        ["--rpc", "--rpcs", "x"],
        ["--rpc-instructions", "--rpcs", "0"],
        ["--rpc", "--bogus"],
        ["--bogus"],
        ["--messages", "--plot", "charts"],
        ["--plot", "charts", "results.json", "--bogus"],
        ["--plot"],
        ["--fast", "--plot"],
    ],
)
def test_a_usage_error_is_one_line_after_the_usage_and_status_2(tmp_path, args):
    result = benchmark(*args, cwd=tmp_path, env=without_matplotlib_or_a_run(tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    usage, error = result.stderr.splitlines()  # benchmark.py's own usage, on one line, whatever parses the options
    assert usage.startswith("usage: python benchmark.py") and "--rigorous" not in usage
    assert error.startswith("python benchmark.py") and ": error: " in error


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
    environ = without(tmp_path, "matplotlib")
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
    assert result.stderr == PLOT_NEEDS_MATPLOTLIB + "\n"


@pytest.mark.parametrize("mode", [[], ["--fast"], ["--rpc"], ["--rpc", "--control"], ["--rpc-instructions"]])
def test_a_run_with_plot_and_no_matplotlib_stops_before_it_starts(tmp_path, mode):
    result = benchmark(*mode, "--plot", "charts", cwd=tmp_path, env=without_matplotlib_or_a_run(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (1, "", PLOT_NEEDS_MATPLOTLIB + "\n")


def per_call_results(path, python_version):
    import pyperf

    metadata = {"name": "encode str->bytes | grpc._common", "python_version": python_version}
    run = pyperf.Run([1e-7, 1.1e-7], metadata=metadata, collect_metadata=False)
    pyperf.BenchmarkSuite([pyperf.Benchmark([run])]).dump(str(path))


def test_plot_refuses_two_per_call_results_of_one_cpython_naming_both(tmp_path):
    per_call_results(tmp_path / "a.json", "3.11.7 (64-bit) revision fa7a6f2303")
    per_call_results(tmp_path / "b.json", "3.11.7 (64-bit) revision fa7a6f2303")
    result = benchmark("--plot", "charts", "a.json", "b.json", cwd=tmp_path, env=without(tmp_path, "matplotlib"))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "python benchmark.py --plot: a.json and b.json are both from CPython 3.11.7; chart one of them\n"
    )


def test_plot_takes_per_call_results_of_two_cpythons(tmp_path):
    per_call_results(tmp_path / "a.json", "3.11.7 (64-bit) revision fa7a6f2303")
    per_call_results(tmp_path / "b.json", "3.12.1 (64-bit) revision 2305ca5144")
    result = benchmark("--plot", "charts", "a.json", "b.json", cwd=tmp_path, env=without(tmp_path, "matplotlib"))
    assert (result.returncode, result.stderr) == (1, PLOT_NEEDS_MATPLOTLIB + "\n")  # read both, then to chart


@pytest.mark.parametrize(
    "saved, what", [({"cpu": {}, "expected": {}}, "--rpc"), ({"instructions": {}}, "--rpc-instructions")]
)
def test_plot_refuses_two_per_rpc_results_of_a_kind_naming_both(tmp_path, saved, what):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(saved))
    result = benchmark("--plot", "charts", "a.json", "b.json", cwd=tmp_path, env=without(tmp_path, "matplotlib"))
    assert (result.returncode, result.stdout) == (1, "")
    assert (
        result.stderr == f"python benchmark.py --plot: a.json and b.json are both {what} results; chart one of them\n"
    )


@pytest.mark.parametrize(
    "mean, ci, verdict",
    [
        (5.0, 2.0, "saved"),
        (-26.25, 24.74, "slower"),  # a control run's: its interval is all below zero
        (1.0, 2.0, "noise"),
        (-1.0, 2.0, "noise"),
        (2.0, 2.0, "noise"),  # the interval reaches zero: it holds it
        (-2.0, 2.0, "noise"),
        (5.0, math.nan, "noise"),  # one round: no interval
    ],
)
def test_an_rpc_saving_is_saved_slower_or_noise_by_where_its_interval_lies(mean, ci, verdict):
    assert benchmarks_module("rpc").saving_verdict(mean, ci) == verdict


def test_an_rpc_saving_whose_rounds_are_all_slower_is_called_slower():
    *_, verdict = benchmarks_module("rpc").saving([10.0, 11.0, 12.0], [20.0, 22.0, 21.0])
    assert verdict == "slower"


def test_a_control_run_expects_no_saving_from_the_counts():
    expected = {"aio unary": {"client": (1.5, 0.5), "server": (0.9, 0.0), "both": (2.0, 1.0)}}
    rpc = benchmarks_module("rpc")
    assert rpc.expected_differences(expected, control=True) == {"aio unary": {"client": 0, "server": 0, "both": 0}}
    assert rpc.expected_differences(expected, control=False) == {"aio unary": {"client": 0.5, "server": 0, "both": 1}}


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
    callgrind = benchmarks_module("callgrind")
    names = {"ob": {}, "fn": {}}
    (tmp_path / "a").write_text(FIRST_DUMP)
    (tmp_path / "b").write_text(SECOND_DUMP)
    first = callgrind.self_costs(str(tmp_path / "a"), "python3.11", names)
    second = callgrind.self_costs(str(tmp_path / "b"), "python3.11", names)
    assert dict(first) == {"interpreter loop": 100, "rest of libpython": 7}
    assert dict(second) == {"interpreter loop": 300, "libc": 90, "grpc's extension": 15}


TLS_DUMP = """\
events: Ir
ob=(1) /usr/lib/libpython3.13.so.1.0
fl=(1)
fn=(1) PyObject_Malloc
10 100
cob=(2) /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
cfn=(2) __tls_get_addr
calls=3 5
10 45
cfn=(1)
calls=1 10
10 100
ob=(2)
fn=(2)
5 45
ob=(3) /site/grpc/_cython/cygrpc.cpython-313-x86_64-linux-gnu.so
fn=(3) grpc_core_thing
1 20
cob=(2)
cfn=(2)
calls=1 5
1 15
ob=(2)
fn=(2)
5 15
"""


def test_the_loaders_thread_state_lookups_count_as_their_callers_when_libpython_calls_them(tmp_path):
    callgrind = benchmarks_module("callgrind")
    (tmp_path / "tls").write_text(TLS_DUMP)
    costs = callgrind.self_costs(str(tmp_path / "tls"), "python3.13", {"ob": {}, "fn": {}})
    # libpython's 100 and the 45 of the lookups it made; grpc's own lookup (15) stays with the rest
    assert dict(costs) == {"rest of libpython": 145, "grpc's extension": 20, "the rest": 15}


@pytest.mark.parametrize(
    "obj, function, expected",
    [
        ("/usr/lib/libpython3.11.so.1.0", "_PyEval_EvalFrameDefault'2", "interpreter loop"),
        ("/usr/bin/python3.11", "main", "rest of libpython"),
        ("/site/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so", "0x0000000000795d80", "grpc's extension"),
        ("/src/fastcommon/fast_common.cpython-311-x86_64-linux-gnu.so", "__pyx_f_encode", "fastcommon"),
        ("/src/fastcommon/fast_metadata.abi3.so", "__pyx_pw_get_all", "fastcommon"),
        ("/lib-dynload/_asyncio.cpython-311-x86_64-linux-gnu.so", "task_step_impl", "Python's other modules"),
        ("/site/google/_upb/_message.abi3.so", "_upb_Decoder_DecodeMessage", "Python's other modules"),
        ("/lib/x86_64-linux-gnu/libc.so.6", "_int_malloc", "libc"),
        ("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "__tls_get_addr", "the rest"),
        ("/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "operator new(unsigned long)", "the rest"),
    ],
)
def test_each_object_is_counted_on_the_python_side_or_not(obj, function, expected):
    callgrind = benchmarks_module("callgrind")
    assert callgrind.category(obj, function, "python3.11") == expected


def test_the_headline_counts_the_python_side_only():
    callgrind = benchmarks_module("callgrind")
    python = ("interpreter loop", "rest of libpython", "fastcommon", "Python's other modules")
    assert python == callgrind.PYTHON_SIDE
    assert (*python, "grpc's extension", "libc", "the rest") == callgrind.OBJECTS


def segment_dump(libpython, cygrpc, libc):
    """One dump of a process: later dumps name their objects and functions by the numbers of the first."""
    return f"events: Ir\nob=(1)\nfn=(1)\n1 {libpython}\nob=(2)\nfn=(2)\n1 {cygrpc}\nob=(3)\nfn=(3)\n1 {libc}\n"


def test_an_rpcs_cost_is_the_2n_segment_less_the_n_segment_over_n_for_each_header_count(tmp_path):
    callgrind = benchmarks_module("callgrind")
    rpc_instructions = benchmarks_module("rpc_instructions")
    first = (
        "events: Ir\nob=(1) /usr/lib/libpython3.11.so.1.0\nfn=(1) PyDict_GetItem\n1 5000\n"
        "ob=(2) /site/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so\nfn=(2) 0x0000000000795d80\n1 7000\n"
        "ob=(3) /lib/x86_64-linux-gnu/libc.so.6\nfn=(3) malloc\n1 9\n"
    )
    dumps = [
        first,  # start-up and warm-up, then for no headers: N RPCs, 2N RPCs (N = 2)
        segment_dump(1000, 400, 30),
        segment_dump(1900, 1300, 50),
        segment_dump(0, 0, 0),  # the warm-up with ten headers
        segment_dump(1200, 500, 30),
        segment_dump(2300, 900, 40),
        segment_dump(77, 77, 77),  # at exit: not counted
    ]
    for number, text in enumerate(dumps, start=1):
        (tmp_path / f"client.{number}").write_text(text)
    noted = [[5, 1, 0], [9, 1, 0], [17, 2, 1], [20, 2, 1], [24, 2, 1], [33, 3, 1]]  # collections so far, at each mark
    (tmp_path / "client.collections").write_text(json.dumps(noted))
    costs = rpc_instructions.per_rpc(str(tmp_path / "client"), 2, "python3.11")
    collections = {headers: by_name.pop("collections") for headers, by_name in costs.items()}
    assert {headers: {name: cost for name, cost in by_name.items() if cost} for headers, by_name in costs.items()} == {
        0: {"rest of libpython": 450, "grpc's extension": 450, "libc": 10},
        10: {"rest of libpython": 550, "grpc's extension": 200, "libc": 5},
    }
    assert collections == {0: [[4, 0, 0], [8, 1, 1]], 10: [[4, 0, 0], [9, 1, 0]]}  # the N segment, then the 2N
    assert callgrind.python_side(costs[0]) == 450
    (tmp_path / "client.7").unlink()
    (tmp_path / "client.6").unlink()
    with pytest.raises(RuntimeError, match="5 callgrind dumps, not 6"):
        rpc_instructions.per_rpc(str(tmp_path / "client"), 2, "python3.11")


def runs(rpc_instructions, stock_grpc, patched_grpc):
    """Results of two runs of each mode for every row: the Python side the same in both, grpc's extension not."""
    results = {}
    for row in rpc_instructions.ROWS:
        for run, (stock, patched) in enumerate(zip(stock_grpc, patched_grpc, strict=True), start=1):
            python = {"interpreter loop": 100, "rest of libpython": 300, "fastcommon": 0, "Python's other modules": 0}
            collected = {"collections": [[3, 0, 0], [6, 1, 0]]}
            results[(*row, "stock", run)] = {
                **python,
                "grpc's extension": stock,
                "libc": 20,
                "the rest": 0,
                **collected,
            }
            python = {**python, "rest of libpython": 280, "fastcommon": 4}
            results[(*row, "patched", run)] = {**python, "grpc's extension": patched, "libc": 20, "the rest": 0,
                                               **collected}  # fmt: skip
    return results


def table_row(table, row):
    """The cells after a row's name in a table, split at spaces."""
    words = len(row.split())
    [cells] = [line.split()[words:] for line in table.splitlines() if line.split()[:words] == row.split()]
    return cells


def test_the_headline_saving_is_the_python_sides_over_the_whole_process_and_shows_the_collections():
    rpc_instructions = benchmarks_module("rpc_instructions")
    results = runs(rpc_instructions, stock_grpc=(100, 140), patched_grpc=(60, 100))  # grpc's threads spun more or less
    text = rpc_instructions.report(results, 600)
    headline, collections = text.split("\n\n")[1:3]
    # The Python side saves 16 of its 400; the whole process's stock runs are 520 and 560, their mean 540: 16 of it.
    # The whole process's own difference (56) is not the saving: grpc's threads spun as they happened to.
    assert table_row(headline, "aio unary, 10 headers client") == ["540", "16", "3.0%", "2.9%", "to", "3.1%", "4.0%",
                                                                   "+0.00%"]  # fmt: skip
    assert table_row(collections, "sync unary, 0 headers server stock") == ["3.0,", "0.0,", "0.0", "6.0,", "1.0,",
                                                                              "0.0"]  # fmt: skip


def test_a_saving_is_that_of_the_means_with_the_range_of_every_stock_run_against_every_patched_one():
    callgrind = benchmarks_module("callgrind")
    stock = [{"rest of libpython": 100, "libc": 100}, {"rest of libpython": 110, "libc": 90}]  # whole: 200 each
    patched = [{"rest of libpython": 90, "libc": 300}, {"rest of libpython": 96, "libc": 0}]  # grpc's noise aside
    headline = callgrind.whole_process_saving(stock, patched)
    assert (headline["stock"], headline["saved"], headline["share"]) == (200.0, 12.0, 12.0 / 200.0)
    assert headline["python_share"] == pytest.approx(12.0 / 105.0)
    assert (headline["low"], headline["high"]) == pytest.approx((4 / 200, 20 / 200))  # 96 against 100; 90 against 110


def test_the_control_is_the_later_half_of_the_stock_runs_against_the_earlier_half():
    control = benchmarks_module("rpc_instructions").control
    whole = [200.0] * 4  # the Python side's difference over the whole process's instructions
    assert control([99.0, 101.0, 100.0, 102.0], whole) == pytest.approx(0.005)  # 101 against 100
    assert control([100.0, 100.0, 98.0, 96.0], whole) == pytest.approx(-0.015)  # 97 against 100: signed
    assert control([100.0, 101.0], whole[:2]) == pytest.approx(0.005)  # two runs: the second against the first


def test_rpc_instructions_says_how_long_it_will_take_then_how_far_it_is(monkeypatch, capsys):
    rpc_instructions = benchmarks_module("rpc_instructions")
    monkeypatch.setattr(rpc_instructions, "serve_and_ask", lambda *args: None)
    monkeypatch.setattr(rpc_instructions, "per_rpc", lambda *args: {0: {}, 10: {}})
    rpc_instructions.measure("stubs", "out", 300, rpc_instructions.FAST_REPEATS)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("--rpc-instructions: 8 runs under callgrind, a server and a client each: about 9 min")
    assert [line.split(";")[0] for line in lines[1:]] == [
        f"--rpc-instructions: {done} of 8 runs ({flavour}, {mode})"
        for done, (flavour, mode) in enumerate(
            ((f, m) for f in ("sync", "aio") for _ in (1, 2) for m in ("stock", "patched")), start=1
        )
    ]
