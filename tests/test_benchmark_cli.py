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
