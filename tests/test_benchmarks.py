"""benchmark.py: the arithmetic behind what it prints, the shape of its output, and its command line's errors."""

import importlib
import io
import itertools
import json
import math
import os
import re
import sys
import types

import helpers
import pytest
from conftest import NEEDS_GRPCIO

pyperf = pytest.importorskip("pyperf", reason="pyperf is a development requirement (requirements.txt), not a test one")
pytest.importorskip("grpc", reason=NEEDS_GRPCIO)  # the benchmarks time grpc

BENCHMARK = os.path.join(helpers.PROJECT_DIR, "benchmark.py")
PLOT_NEEDS_MATPLOTLIB = "--plot needs matplotlib, which is not installed: pip install matplotlib\n"


def benchmark(*args, cwd, env=None, **kwargs):
    return helpers.python(BENCHMARK, *args, cwd=cwd, env=env, **kwargs)


def without_matplotlib(tmp_path):
    """An environment without matplotlib, nor grpc_tools, with which every run starts (generating the echo stubs):
    a run that should have stopped before it started fails at once rather than running for minutes."""
    blocker = tmp_path / "blocked_modules"
    blocker.mkdir(exist_ok=True)
    for module in ("matplotlib", "grpc_tools"):
        (blocker / f"{module}.py").write_text(f"raise ImportError('{module} is blocked for this test')\n")
    return {"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}


sys.path.insert(0, os.path.dirname(BENCHMARK))
try:
    callgrind, instructions, messages, price, rpc, rpc_instructions, saturation, suite, timing = (
        importlib.import_module(f"benchmarks.{name}")
        for name in (
            "callgrind",
            "instructions",
            "messages",
            "price",
            "rpc",
            "rpc_instructions",
            "saturation",
            "suite",
            "timing",
        )
    )
finally:
    sys.path.remove(os.path.dirname(BENCHMARK))


def bench(name, *processes):
    """A pyperf result: a calibration run without values, then one run of values (ns) per process."""
    runs = [pyperf.Run([], warmups=[(1, 1e-7)], metadata={"name": name, "loops": 1}, collect_metadata=False)]
    runs += [pyperf.Run([ns * 1e-9 for ns in values], metadata={"name": name}, collect_metadata=False)
             for values in processes]  # fmt: skip
    return pyperf.Benchmark(runs)


def cells(table):
    """A table's lines cut into stripped cells at the spans of its rule (the line of dashes under the header), each
    cell within its span: what is not aligned fails."""
    lines = table.splitlines()
    spans = [match.span() for match in re.finditer(r"-+", lines[1])]
    rows = []
    for line in [lines[0], *lines[2:]]:
        line = line.ljust(spans[-1][1])
        assert len(line) == spans[-1][1] and all(line[end : end + 2].strip() == "" for _, end in spans[:-1]), line
        rows.append([line[start:end].strip() for start, end in spans])
    return rows


@pytest.mark.parametrize(
    "numerator, denominator, cell",
    [
        ((100.0, 5.0), (50.0, 5.0), "2.00x"),  # 95/55 to 105/45: all above 1
        ((100.0, 10.0), (95.0, 10.0), "within noise"),  # 90/105 to 110/85
        ((9.0, 0.5), (10.0, 0.5), "within noise"),  # below the floor, 8.5/10.5 to 9.5/9.5: reaches 1.00
        ((8.0, 0.5), (10.0, 0.5), "0.80x"),  # below the floor, 7.5/10.5 to 8.5/9.5: all below 1
        ((100.0, 1.0), (50.0, 60.0), "within noise"),  # the denominator's interval reaches zero
        ((100.0, math.nan), (50.0, math.nan), "within noise"),  # one process: no interval
    ],
)
def test_a_ratio_is_a_result_only_where_the_range_its_intervals_allow_leaves_out_one(numerator, denominator, cell):
    assert timing.ratio_cell(numerator, denominator) == cell
    assert timing.ratio_range((100.0, 10.0), (50.0, 5.0)) == (2.0, 90 / 55, 110 / 45)


def test_a_result_is_the_mean_of_its_processes_means_with_their_95_percent_interval():
    # Process means 110, 110, 100 (the calibration run has no values): mean 106.67; s = 5.774, t(2) = 4.303.
    mean, half = timing.summary(bench("x", [100.0, 120.0], [110.0, 110.0], [90.0, 110.0]))
    assert (mean, half) == pytest.approx((320 / 3, 4.303 * 5.7735 / math.sqrt(3)), rel=1e-4)
    assert timing.mean_and_ci95([1.0, 3.0]) == pytest.approx((2.0, 12.706))  # t(1): s = 1.414, over sqrt(2)
    assert math.isnan(timing.summary(bench("x", [100.0, 120.0]))[1])


@pytest.mark.parametrize(
    "through, bare, cell",
    [((100.0, 2.0), (80.0, 2.0), "20.0%"), ((100.0, 15.0), (90.0, 10.0), "within noise")],
)
def test_a_wrappers_share_is_a_result_only_outside_the_noise(through, bare, cell):
    assert messages.share_cell(through, bare) == cell


def test_the_per_call_table_is_aligned_names_each_floor_in_its_row_and_prints_no_noise_as_a_result():
    timed = {
        "decode str->str | grpc._common": (68.0, 3.0),
        "decode str->str | fastcommon.common": (62.0, 10.0),  # grpc's own code again: noise
        "decode str->str | fastcommon.fast_common": (10.1, 1.6),  # 0.87x its floor, within noise
        "decode str->str | floor: callable(x)": (11.6, 2.2),
        "serialize Echo message | grpc._common": (217.0, 27.0),  # no floor
        "serialize Echo message | fastcommon.fast_common": (137.7, 6.2),
        "metadata entry | grpc._cython.cygrpc": (278.0, 61.6),
        "metadata entry | fastcommon.fast_common": (66.1, math.nan),  # one process
        "metadata entry | floor: a plain tuple (k, v)": (29.2, 4.5),
    }
    rows = cells(suite.per_call_table(timed, ["decode str->str", "serialize Echo message", "metadata entry"]))
    assert [row[0] for row in rows] == ["case", "decode str->str", "", "", "", "serialize Echo message", "",
                                        "metadata entry", "", ""]  # fmt: skip
    assert [row[1:] for row in rows[1:5]] == [
        ["grpc._common", "68.0", "± 3.0", "", "5.86x"],
        ["fastcommon.common", "62.0", "± 10.0", "within noise", "5.34x"],
        ["fastcommon.fast_common", "10.1", "± 1.6", "6.73x", "within noise"],
        ["floor: callable(x)", "11.6", "± 2.2", "", ""],  # the floor, named where it is
    ]
    assert [row[1:] for row in rows[5:7]] == [
        ["grpc._common", "217.0", "± 27.0", "", ""],
        ["fastcommon.fast_common", "137.7", "± 6.2", "1.58x", ""],
    ]
    assert rows[8][1:] == ["fastcommon.fast_common", "66.1", "", "within noise", "within noise"]
    assert rows[9][1] == "floor: a plain tuple (k, v)"


def test_the_noise_is_one_line_naming_the_widest_interval():
    benches = {
        "steady": bench("steady", [100.0, 100.0], [100.0, 100.0], [100.0, 100.0]),
        "noisy": bench("noisy", [100.0, 100.0], [150.0, 150.0], [50.0, 50.0]),  # 100 ± 4.303 * 50 / sqrt(3)
    }
    [line] = timing.noise_line(benches).splitlines()
    assert re.search(r"±124% .*\(noisy\).* 1 of 2 ", line)  # pyperf flags the noisy one


def test_the_per_call_run_says_its_steps_then_how_far_it_is_in_place_of_pyperfs_line_for_a_result(capsys):
    def bench_time_func(name, *args, inner_loops):  # pyperf's, in the manager: its line for the result, and another
        print(f"{name}: Mean +- std dev: 100 ns +- 1 ns\nERROR: a line of pyperf's own")
        return bench(name, [100.0], [100.0])

    runner = types.SimpleNamespace(args=types.SimpleNamespace(verbose=False), bench_time_func=bench_time_func)
    timings = [(f"case | way {n}", None, ()) for n in range(31)]
    progress = timing.Progress("per call", len(timings), "timings", clock=itertools.count(0, 7).__next__)  # 7 s each
    timing.run_timings(runner, timings, progress)
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["per call: 31 timings", "ERROR: a line of pyperf's own",
                       "per call: 1 of 31 timings, 7 s so far; about 3.5 min left at the pace so far (case | way 0: "
                       "100.0 ns)"]  # fmt: skip
    assert len(err) == 1 + 2 * 31 and not [line for line in err if "Mean +- std dev" in line]


def test_rpc_instructions_says_how_long_it_will_take_and_on_what_based_then_how_far_it_is(monkeypatch, capsys):
    monkeypatch.setattr(rpc_instructions, "serve_and_ask", lambda *args: None)
    monkeypatch.setattr(rpc_instructions, "per_rpc", lambda *args: {0: {}, 10: {}})
    rpc_instructions.measure("stubs", "out", 300, 2, clock=itertools.count(0, 60).__next__)
    first, *steps = capsys.readouterr().err.splitlines()
    # 8 runs x (34 s to start + 0.011 s x (30 + 3 x 300 + 6) RPCs x 2 processes): about 437 s
    assert "8 runs" in first and "about 7.3 min at the pace measured on a 2-core machine" in first
    assert len(steps) == 8 and "1 of 8 runs, 60 s so far; about 7.0 min left" in steps[0]


def test_instructions_py_shows_each_case_as_the_child_finishes_it_weighed_by_its_time_without_callgrind(capsys):
    def start(count):
        return timing.Progress(
            "instructions.py", count, "cases", clock=itertools.count(0, 10).__next__, weights=[1, 1, 6]
        )

    child = iter(["3\n", "0.1 loop\n", "0.2 callable(x)\n", "9.0 aio call metadata, none | grpc.aio\n"])
    assert instructions.follow(child, start) == ["loop", "callable(x)", "aio call metadata, none | grpc.aio"]
    assert instructions.follow(iter([]), start) == []  # a child that failed before it began
    # 10 s for a case of weight 1: the 7 to come at that pace
    assert (
        capsys.readouterr()
        .err.splitlines()[1]
        .startswith("instructions.py: 1 of 3 cases, 10 s so far; about 70 s left")
    )


def test_rpc_shows_each_round(monkeypatch, capsys):
    process = types.SimpleNamespace(stdin=io.StringIO(), wait=lambda timeout: 0)
    monkeypatch.setattr(rpc, "start", lambda args: (process, "5000"))
    monkeypatch.setattr(rpc, "ask", lambda process, line: [0.004, 0.002] if "|" in line else [1.0])
    progress = timing.Progress("--rpc", 2, "rounds", clock=itertools.count(0, 8).__next__)
    measured = rpc.measure_rounds("stubs", ("stock", "patched"), 2, 400, progress)
    assert measured["stock", "aio unary"] == {"wall": [10.0, 10.0], "client cpu": [5.0, 5.0], "server cpu": [0, 0]}
    assert capsys.readouterr().err.splitlines()[1:] == [
        "--rpc: 1 of 2 rounds, 8 s so far; about 8 s left at the pace so far",
        "--rpc: 2 of 2 rounds, 16 s so far; about 0 s left at the pace so far",
    ]


@pytest.mark.parametrize(
    "mean, ci, verdict",
    [(5.0, 2.0, "saved"), (-26.25, 24.74, "slower"), (1.0, 2.0, "noise"), (-2.0, 2.0, "noise"),
     (2.0, 2.0, "noise"), (5.0, math.nan, "noise")],  # an interval reaching zero holds it; one round: none
)  # fmt: skip
def test_an_rpc_saving_is_saved_slower_or_noise_by_where_its_interval_lies(mean, ci, verdict):
    assert rpc.saving_verdict(mean, ci) == verdict


def test_an_rpc_saving_is_paired_by_round_and_a_control_run_expects_none():
    assert rpc.saving([10.0, 11.0, 12.0], [20.0, 22.0, 21.0])[::2] == (-10.0, "slower")
    expected = {"aio unary": {"client": (1.5, 0.5), "server": (0.9, 0.0), "both": (2.0, 1.0)}}
    assert rpc.expected_differences(expected, control=True) == {"aio unary": {"client": 0, "server": 0, "both": 0}}
    assert rpc.expected_differences(expected, control=False) == {"aio unary": {"client": 0.5, "server": 0, "both": 1}}


def dump(text):
    """A callgrind dump from its lines, written with ";" between them."""
    return "events: Ir\n" + "".join(f"{line.strip()}\n" for line in text.split(";"))


# Two dumps of one process, as --dump-before writes them: names are compressed once per run, in the dump (and on the
# line, a function's or a call's) that first has them; a call's inclusive cost (after calls=) is not counted.
FIRST_DUMP = dump(
    "ob=(1) /usr/lib/libpython3.11.so.1.0; fl=(1) ceval.c; fn=(1) _PyEval_EvalFrameDefault; 10 100;"
    "cob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6; cfn=(2) memcpy; calls=1 5; 10 40;"
    "ob=(1); fn=(3) PyDict_GetItem; 20 7"
)
SECOND_DUMP = dump(
    "ob=(1); fl=(1); fn=(1); 10 300; cob=(2); cfn=(2); calls=2 5; 10 90; ob=(2); fn=(2); 5 90;"
    "ob=(3) /site/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so; fn=(4) __pyx_f_cygrpc; 1 11; +2 4"
)
# libpython calls the loader's thread-state lookup (3 calls, 45), and itself; grpc calls the lookup too (15).
TLS_DUMP = dump(
    "ob=(1) /usr/lib/libpython3.13.so.1.0; fl=(1); fn=(1) PyObject_Malloc; 10 100;"
    "cob=(2) /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2; cfn=(2) __tls_get_addr; calls=3 5; 10 45;"
    "cfn=(1); calls=1 10; 10 100; ob=(2); fn=(2); 5 45;"
    "ob=(3) /site/grpc/_cython/cygrpc.cpython-313-x86_64-linux-gnu.so; fn=(3) grpc_core_thing; 1 20;"
    "cob=(2); cfn=(2); calls=1 5; 1 15; ob=(2); fn=(2); 5 15"
)


def test_callgrind_dumps_are_read_with_names_from_earlier_dumps_and_calls_not_counted_twice(tmp_path):
    names = {"ob": {}, "fn": {}}
    for name, text in (("a", FIRST_DUMP), ("b", SECOND_DUMP), ("tls", TLS_DUMP)):
        (tmp_path / name).write_text(text)
    assert dict(callgrind.self_costs(str(tmp_path / "a"), "python3.11", names)) == {
        "interpreter loop": 100, "rest of libpython": 7}  # fmt: skip
    assert dict(callgrind.self_costs(str(tmp_path / "b"), "python3.11", names)) == {
        "interpreter loop": 300, "libc": 90, "grpc's extension": 15}  # fmt: skip
    # libpython's 100 and the 45 of the thread-state lookups it made; grpc's own lookup (15) stays with the rest
    assert dict(callgrind.self_costs(str(tmp_path / "tls"), "python3.13", {"ob": {}, "fn": {}})) == {
        "rest of libpython": 145, "grpc's extension": 20, "the rest": 15}  # fmt: skip


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
    assert callgrind.category(obj, function, "python3.11") == expected


def segment_dump(libpython, cygrpc, libc):
    """One dump of a process: later dumps name their objects and functions by the numbers of the first."""
    return dump(f"ob=(1); fn=(1); 1 {libpython}; ob=(2); fn=(2); 1 {cygrpc}; ob=(3); fn=(3); 1 {libc}")


def test_an_rpcs_cost_is_the_2n_segment_less_the_n_segment_over_n_for_each_header_count(tmp_path):
    first = dump(
        "ob=(1) /usr/lib/libpython3.11.so.1.0; fn=(1) PyDict_GetItem; 1 5000;"
        "ob=(2) /site/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so; fn=(2) 0x0000000000795d80; 1 7000;"
        "ob=(3) /lib/x86_64-linux-gnu/libc.so.6; fn=(3) malloc; 1 9"
    )
    # Start-up and warm-up; for no headers N RPCs (N = 2), then 2N; the warm-up with ten headers, N, 2N; at exit.
    segments = [(1000, 400, 30), (1900, 1300, 50), (0, 0, 0), (1200, 500, 30), (2300, 900, 40), (77, 77, 77)]
    dumps = [first, *(segment_dump(*costs) for costs in segments)]
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


def test_the_headline_is_the_python_sides_saving_over_the_whole_process_with_every_pairs_range():
    stock = [{"rest of libpython": 100, "libc": 100}, {"rest of libpython": 110, "libc": 90}]  # whole: 200 each
    patched = [{"rest of libpython": 90, "libc": 300}, {"rest of libpython": 96, "libc": 0}]  # grpc's noise aside
    headline = callgrind.whole_process_saving(stock, patched)
    assert (headline["stock"], headline["saved"], headline["share"]) == (200.0, 12.0, 12.0 / 200.0)
    assert headline["python_share"] == pytest.approx(12.0 / 105.0)
    assert (headline["low"], headline["high"]) == pytest.approx((4 / 200, 20 / 200))  # 96 against 100; 90 against 110


def test_the_control_is_the_later_half_of_the_stock_runs_against_the_earlier_half():
    control = rpc_instructions.control
    whole = [200.0] * 4  # the Python side's difference over the whole process's instructions
    assert control([99.0, 101.0, 100.0, 102.0], whole) == pytest.approx(0.005)  # 101 against 100
    assert control([100.0, 100.0, 98.0, 96.0], whole) == pytest.approx(-0.015)  # 97 against 100: signed
    assert control([100.0, 101.0], whole[:2]) == pytest.approx(0.005)  # two runs: the second against the first


def test_the_rpc_instructions_report_puts_the_headline_and_the_collections_in_aligned_rows():
    results = {}
    for row in rpc_instructions.ROWS:
        for run, grpcs in enumerate(((100, 60), (140, 100)), start=1):  # grpc's threads spun more or less
            python = {"interpreter loop": 100, "rest of libpython": 300, "fastcommon": 0, "Python's other modules": 0}
            rest = {"libc": 20, "the rest": 0, "collections": [[3, 0, 0], [6, 1, 0]]}
            results[(*row, "stock", run)] = {**python, "grpc's extension": grpcs[0], **rest}
            patched = {**python, "rest of libpython": 280, "fastcommon": 4}
            results[(*row, "patched", run)] = {**patched, "grpc's extension": grpcs[1], **rest}
    text = rpc_instructions.report(results, 600, {"import": 8_000, "patch": 32_000})
    headline, collections = text.split("\n\n")[1:3]
    # The Python side saves 16 of its 400; the whole process's stock runs are 520 and 560, their mean 540: 16 of it.
    # The whole process's own difference (56) is not the saving: grpc's threads spun as they happened to.
    rows = {tuple(row[:2]): row[2:] for row in cells(headline)}
    assert rows["aio unary, 10 headers", "client"] == ["540", "16", "3.0%", "2.9% to 3.1%", "4.0%", "+0.00%",
                                                       "2,500 RPCs"]  # the price, 40,000, over 16  # fmt: skip
    assert "8,000 instructions for import fastcommon and 32,000 for patch()" in text
    rows = {tuple(row[:3]): row[3:] for row in cells(collections.split("\n", 1)[1])}
    assert rows["sync unary, 0 headers", "server", "stock"] == ["3.0, 0.0, 0.0", "6.0, 1.0, 0.0"]


def test_help_leads_with_the_modes_then_pyperfs_options_and_says_no_duration(tmp_path):
    result = benchmark("--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    ours = max(text.index(f"  {option}") for option in ("--fast", "--messages", "--rpc", "--saturate", "--rounds"))
    assert ours < text.index("pyperf's options") < text.index("--rigorous")
    assert not re.search(r"\d\s*(s|sec|seconds?|min|minutes?|h|hours?)\b", text)  # durations depend on the machine


@pytest.mark.parametrize(
    "args",
    [["--rpc", "--rounds", "0"], ["--rpc", "--rpcs", "x"], ["--rpc-instructions", "--rpcs", "0"], ["--rpc", "--bogus"],
     ["--bogus"], ["--messages", "--plot", "charts"], ["--plot", "charts", "results.json", "--bogus"], ["--plot"],
     ["--saturate", "--rounds", "0"], ["--saturate", "--duration", "1.5"], ["--saturate", "--row", "aio-server-1"],
     ["--saturate", "--control"], ["--saturate", "--rpcs", "400"]],
)  # fmt: skip
def test_a_usage_error_is_one_line_after_the_usage_and_status_2(tmp_path, args):
    result = benchmark(*args, cwd=tmp_path, env=without_matplotlib(tmp_path))
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


def per_call_results(path, python_version):
    metadata = {"name": "encode str->bytes | grpc._common", "python_version": python_version}
    run = pyperf.Run([1e-7, 1.1e-7], metadata=metadata, collect_metadata=False)
    pyperf.BenchmarkSuite([pyperf.Benchmark([run])]).dump(str(path))


@pytest.mark.parametrize(
    "saved, what",
    [("3.11.7 (64-bit)", "from CPython 3.11.7"), ({"cpu": {}, "expected": {}}, "--rpc results"),
     ({"instructions": {}}, "--rpc-instructions results"), ({"saturation": {}}, "--saturate results")],
)  # fmt: skip
def test_plot_refuses_two_results_of_one_kind_naming_both(tmp_path, saved, what):
    for name in ("a.json", "b.json"):
        if isinstance(saved, str):
            per_call_results(tmp_path / name, saved)
        else:
            (tmp_path / name).write_text(json.dumps(saved))
    result = benchmark("--plot", "charts", "a.json", "b.json", cwd=tmp_path, env=without_matplotlib(tmp_path))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"python benchmark.py --plot: a.json and b.json are both {what}; chart one of them\n"


@pytest.mark.parametrize(
    "mode", [[], ["--fast"], ["--rpc"], ["--rpc-instructions"], ["--saturate"], ["3.11.json", "3.12.json"]]
)
def test_plot_without_matplotlib_stops_before_a_run_in_one_line(tmp_path, mode):
    per_call_results(tmp_path / "3.11.json", "3.11.7 (64-bit)")
    per_call_results(tmp_path / "3.12.json", "3.12.1 (64-bit)")  # read both, then to chart
    result = benchmark("--plot", "charts", *mode, cwd=tmp_path, env=without_matplotlib(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (1, "", PLOT_NEEDS_MATPLOTLIB)


def test_rpc_instructions_without_valgrind_says_so_in_one_line(tmp_path):
    result = benchmark("--rpc-instructions", cwd=tmp_path, env={"PATH": str(tmp_path)})  # no valgrind
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and line.startswith("--rpc-instructions needs valgrind, which is not installed")


def test_a_closed_pipe_ends_the_help_quietly(tmp_path):
    result = benchmark("--help", cwd=tmp_path, closed_stdout=True)  # as `python benchmark.py --help | head -1`
    assert (result.returncode, result.stderr) == (1, "")


@pytest.mark.parametrize("named", [None, "no-such-ghz"])
def test_saturate_without_ghz_says_in_one_line_how_to_get_it(tmp_path, named):
    environ = {**without_matplotlib(tmp_path), "PATH": str(tmp_path), saturation.GHZ_VARIABLE: named}  # no ghz
    result = benchmark("--saturate", cwd=tmp_path, env=environ)
    [line] = result.stderr.splitlines()
    assert (result.returncode, result.stdout) == (1, "") and line.startswith("--saturate needs ghz, ")
    assert f"go install {saturation.GHZ_PACKAGE}, then put it on PATH or set {saturation.GHZ_VARIABLE}" in line
    assert ("no-such-ghz" in line) == (named is not None)


def saturated(cpu_us, rps=1000.0):
    """A run's figures with this CPU per RPC (split 60:40 into user and system) and requests per second."""
    return saturation.figures(rps, 1.0, 0.6 * cpu_us * rps / 1e6, 0.4 * cpu_us * rps / 1e6)


def test_a_saturation_ratio_pairs_each_round_with_its_stock_run_so_that_a_drift_between_rounds_cancels():
    stock = [saturated(cpu) for cpu in (400.0, 500.0, 300.0)]  # the machine's load moves every run of a round
    patched = [saturated(cpu) for cpu in (376.0, 475.0, 279.0)]  # 0.94, 0.95, 0.93: s = 0.01, t(2) = 4.303
    mean, half = saturation.paired_ratio(stock, patched, "cpu")
    assert (mean, half) == pytest.approx((0.94, 4.303 * 0.01 / math.sqrt(3)))
    assert saturation.ratio_cell(mean, half) == "0.940 ± 0.025"
    assert saturation.paired_ratio(stock, patched, "user") == pytest.approx((mean, half))  # the same split


@pytest.mark.parametrize(
    "mean, half, noise",
    [(0.94, 0.025, False), (1.02, 0.03, True), (0.75, 0.25, True), (1.05, 0.04, False), (0.9, math.nan, True)],
)  # an interval reaching 1.00 holds it; one round has none
def test_a_saturation_ratio_is_within_noise_where_its_interval_holds_one(mean, half, noise):
    assert saturation.within_noise(mean, half) == noise
    assert saturation.ratio_cell(mean, half).endswith(" within noise") == noise


def test_a_saturation_run_turns_the_modes_and_saves_every_run_and_ratio_as_json(tmp_path, monkeypatch, capsys):
    ran = []

    def run(setup, row, mode):
        ran.append((row, mode))
        round_number = ran.count((row, mode))
        return saturated({"stock": 260.0, "patched": 250.0, "control": 259.0 + round_number % 2 * 2}[mode])

    monkeypatch.setattr(saturation, "require_ghz", lambda: "ghz")
    monkeypatch.setattr(saturation.Setup, "run", run)
    monkeypatch.setattr(sys, "argv", ["benchmark.py", "--saturate", "--rounds", "3", "-o", "out.json"])
    rows = ["aio-server-10", "sync-client-10"]
    args = types.SimpleNamespace(plot=None, row=rows, rounds=3, duration=1, o=str(tmp_path / "out.json"))
    saturation.main(args)
    assert ran[:6] == [(row, mode) for row in rows for mode in ("stock", "patched", "control")]
    assert ran[6:9] == [("aio-server-10", mode) for mode in ("patched", "control", "stock")]  # the second round
    out, err = capsys.readouterr()
    assert err.startswith("--saturate: 18 runs (3 rounds, each row stock, patched and stock again; rows: "
                          "aio-server-10, sync-client-10), ") and len(err.splitlines()) == 1 + 18  # fmt: skip
    shown = cells(out.split(" interval:\n")[1].split("\n\n")[0])
    client = shown.index(["sync client, 10 headers", "requests/s", "1,000.0 ± 0.0", "1.000 ± 0.000 within noise",
                          "1.000 ± 0.000 within noise"])  # fmt: skip
    # patched 250 against 260 each round; the control 261, 259, 261 against 260
    assert shown[client + 1] == ["", "CPU µs/RPC", "260.0 ± 0.0", "0.962 ± 0.000", "1.001 ± 0.011 within noise"]
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["command"] == "python benchmark.py --saturate --rounds 3 -o out.json"
    assert (saved["rounds"], saved["seconds"], saved["warm_up"]) == (3, 1, saturation.WARM_UP)
    assert set(saved["load_average"]) == {"before", "after"}
    row = saved["saturation"]["aio-server-10"]
    assert row["label"] == "grpc.aio server, 10 headers" and set(row["runs"]) == {"stock", "patched", "control"}
    assert [run["errors"] for mode in row["runs"].values() for run in mode] == [0] * 9
    assert set(row["ratios"]["patched"]) == set(saturation.METRICS)
    assert row["ratios"]["patched"]["rps"] == [1.0, 0.0]


needs_two_cores = pytest.mark.skipif(len(saturation.usable_cores()) < 2, reason="--saturate runs on 2 cores")


@needs_two_cores
def test_a_client_row_runs_without_ghz_and_counts_its_own_rpcs(tmp_path):
    environ = {"PATH": str(tmp_path), saturation.GHZ_VARIABLE: None}  # a client row's load is its own
    args = ("--saturate", "--rounds", "1", "--duration", "1", "--row", "aio-client-10", "-o", "out.json")
    benchmark(*args, cwd=tmp_path, env=environ, check_status=0)
    runs = json.loads((tmp_path / "out.json").read_text())["saturation"]["aio-client-10"]["runs"]
    assert all(run["errors"] == 0 and run["rpcs"] > 0 for mode in runs.values() for run in mode)


@needs_two_cores
@pytest.mark.skipif(
    saturation.find_ghz() is None,
    reason=f"ghz is not on PATH nor in ${saturation.GHZ_VARIABLE} (go install {saturation.GHZ_PACKAGE}); CI builds "
    "it and runs --saturate's short version",
)
def test_a_server_row_is_driven_by_ghz_with_no_error(tmp_path):
    args = ("--saturate", "--rounds", "1", "--duration", "1", "--row", "sync-server-0", "-o", "out.json")
    result = benchmark(*args, cwd=tmp_path, check_status=0)
    assert "sync server, 0 headers" in result.stdout
    runs = json.loads((tmp_path / "out.json").read_text())["saturation"]["sync-server-0"]["runs"]
    assert all(run["errors"] == 0 and run["rpcs"] > 0 for mode in runs.values() for run in mode)


def test_the_price_is_import_then_patch_in_fresh_processes_that_imported_grpc():
    paid = price.in_fresh_processes(1)
    assert paid["processes"] == 1 and 0 < paid["import_ms"] < paid["patch_ms"]
    assert paid["memory_kib"] is None or paid["memory_kib"] > 0  # None where there is no /proc
    assert price.line(paid).startswith("the price, once per process (median of 1 fresh processes that imported grpc)")
