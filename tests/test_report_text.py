"""What `run --report` says: three short lines per process, whatever its names and counts; every name under
--report-full; every count in the JSON line."""

import json
import os
import re

import pytest
from conftest import NEEDS_GRPCIO
from test_adoption import REPORT_BLOCK, WIDTH, reports

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers  # noqa: E402

FUNCTIONS = ("encode", "decode", "serialize", "deserialize")


def summary(calls, implementation="cython", ended_by="exit", saving=lambda name: 100.0):
    """A process's summary with these calls, each saving ``saving(name)`` ns, over 1 s of CPU."""
    report = helpers.Report()
    report.per_call_saving_ns = saving
    return report.summary(calls, cpu_seconds=1.0, ended_by=ended_by) | {"implementation": implementation}


def large(names):
    """Each name called a different, large number of times."""
    return {name: 10**9 * (i + 1) + i for i, name in enumerate(names)}


SUMMARIES = {
    "all-called-large-counts": lambda: summary(large(helpers.NAMES), saving=lambda name: 1234.5),
    "two-left-to-grpc": lambda: summary(
        large(n for n in helpers.NAMES if n not in ("Metadata.get", "Metadata.get_all"))
    ),
    "ended-by-sigterm": lambda: summary(large(helpers.NAMES), ended_by="SIGTERM"),
    "pure-python": lambda: summary(large(FUNCTIONS), implementation="python", saving=lambda name: 0.0),
    "no-calls": lambda: summary(dict.fromkeys(helpers.NAMES, 0)),
    "no-calls-pure-python": lambda: summary(dict.fromkeys(FUNCTIONS, 0), implementation="python"),
}


@pytest.mark.parametrize("case", SUMMARIES)
def test_three_short_lines_whatever_the_names_and_counts(case):
    said = SUMMARIES[case]()
    text = helpers.report_text(said)
    lines = text.splitlines()
    assert len(lines) == 3 and all(len(line) <= WIDTH for line in lines), [len(line) for line in lines]
    block = REPORT_BLOCK.fullmatch(text)
    assert (
        block and int(block["patched"]) == len(said["calls"]) and int(block["left"] or 0) == len(said["left_to_grpc"])
    )
    assert bool(block["ended"]) == (said["ended_by"] == "SIGTERM")
    [shown] = reports(text).values()
    assert shown == {name: said["calls"][name] for name in shown}  # each as counted, most called first
    for name, count in said["calls"].items():  # each count at most once, and never a zero
        assert len(re.findall(rf"(?<![\w.]){re.escape(name)} {count:,}(?!\d|,\d)", text)) == (name in shown)
        assert not re.search(rf"(?<![\w.]){re.escape(name)} 0(?!\d|,\d)", text)
    assert all(len(line) <= WIDTH for line in helpers.report_text(said, full=True).splitlines())


@pytest.mark.parametrize("metadatum", [True, False], ids=["all", "metadatum-left-to-grpc"])
def test_the_block_adds_up(metadatum):
    calls = {"encode": 0, "decode": 2000, "serialize": 1000, "deserialize": 0} | (
        {"_Metadatum": 0} if metadatum else {}
    )
    said = summary(calls, saving={"decode": 40.0, "serialize": 30.0}.__getitem__)
    text = helpers.report_text(said)
    block = REPORT_BLOCK.fullmatch(text)
    assert (int(block["pid"]), block["grpcio"]) == (os.getpid(), grpc.__version__)
    assert (int(block["patched"]), int(block["left"])) == (len(calls), len(helpers.NAMES) - len(calls))
    assert block["left_names"].startswith(next(name for name in helpers.NAMES if name not in calls))
    assert list(reports(text)[os.getpid()].items()) == [("decode", 2000), ("serialize", 1000)]
    assert f"({len(calls) - 2} of {len(calls)} not called)" in block["calls"]
    # 2,000 calls saving 40 ns and 1,000 saving 30 ns: 0.11 ms of 1 s of CPU; per call, the most called first.
    assert re.match(r"0\.110 ms, 0\.01% .* 1\.000 s CPU \(per call: decode 40 ns, serialize 30 ns\)$", block["saved"])


def test_a_saving_timing_cannot_tell_from_none_reads_within_noise_never_below_zero():
    from grpc import _common

    report = helpers.Report()
    report.timed = {"decode": (_common.decode, _common.decode)}  # the same function on both sides: nothing saved
    assert report.per_call_saving_ns("decode") >= 0.0
    text = helpers.report_text(summary({"encode": 0, "decode": 5}, saving=lambda name: 0.0))
    assert "decode within noise" in REPORT_BLOCK.fullmatch(text)["saved"]


def test_report_names_what_was_called_as_is_patched_takes_it():
    calls = dict.fromkeys(helpers.NAMES, 0) | {"decode": 3, "Metadata.add": 2}
    text = helpers.report_text(summary(calls, saving=lambda name: 1000.0))
    assert reports(text)[os.getpid()] == {"decode": 3, "Metadata.add": 2}
    assert f"(15 of {len(helpers.NAMES)} not called)" in text and "saved: 0.005 ms" in text  # 5 calls, 1 µs each


@pytest.mark.parametrize("implementation", ["cython", "python"])
def test_a_process_with_no_calls_says_so_plainly(implementation):
    text = helpers.report_text(summary(dict.fromkeys(FUNCTIONS, 0), implementation=implementation))
    block = REPORT_BLOCK.fullmatch(text)
    assert block["calls"] == "none" and "per call" not in text and "-" not in text.replace("--report", "")


def test_the_full_report_gives_every_name_a_line():
    calls = dict.fromkeys((n for n in helpers.NAMES if n != "Metadata.get"), 0) | {"decode": 4000, "encode": 1}
    lines = helpers.report_text(summary(calls), full=True).splitlines()
    assert lines[0].startswith("fastcommon --report, process ") and lines[1].startswith("  saved: ")
    by_name = {line.split()[0]: line for line in lines[2:]}
    assert len(lines) - 2 == len(by_name) and list(by_name) == [*calls, "Metadata.get"]
    for name, count in calls.items():
        assert by_name[name].split()[1] == f"{count:,}" and ("saved per call: 100 ns" in by_name[name]) == bool(count)
    assert "left to grpc" in by_name["Metadata.get"]


@pytest.mark.parametrize("value, asked", [("", (False, False)), ("0", (False, False)), ("1", (True, False)),
                                          ("full", (True, True))])  # fmt: skip
def test_the_report_variable_says_how_much(monkeypatch, value, asked):
    monkeypatch.setenv(helpers.REPORT_VARIABLE, value)
    monkeypatch.delenv(helpers.REPORT_FILE_VARIABLE, raising=False)
    assert helpers.launcher.report_asked() == (*asked, None)


def test_report_full_prints_every_name_and_the_file_every_count(tmp_path):
    program = "from grpc import _common\n_common.decode(b'x')\n"
    result = helpers.python("-m", "fastcommon", "run", "--report-full", "--report-file", "r.jsonl", "-c", program,
                            cwd=tmp_path, check_status=0)  # fmt: skip
    [record] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert record["calls"] == dict.fromkeys(record["patched"], 0) | {"decode": 1}  # the zeros too
    lines = result.stderr[result.stderr.index("fastcommon --report, process ") :].splitlines()
    by_name = {line.split()[0]: line for line in lines[2:]}
    assert len(lines) - 2 == len(by_name) and set(by_name) == set(helpers.NAMES)
    assert by_name["decode"].split()[1] == "1" and all(
        by_name[name].split()[1] == "0" for name in record["patched"] if name != "decode"
    )
