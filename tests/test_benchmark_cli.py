"""benchmark.py as a person types it: its help leads with its own modes, and a bad results file is one line."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyperf", reason="pyperf is a development requirement (requirements.txt), not a test one")

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
