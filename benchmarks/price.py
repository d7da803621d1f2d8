"""What fastcommon costs a process, once: `import fastcommon`, then `patch()` (its gate judges grpc's objects and
loads the compiled modules). In fresh processes that have imported grpc, as every program that patches it has: the
time of each, median of PROCESSES, and the resident memory patch() leaves; under callgrind, the instructions of
each, which --rpc-instructions sets against each process's saving per RPC: the RPCs after which it is repaid."""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks.callgrind import whole_process

PROCESSES = 15
# Each mark is a call to getppid, where callgrind (--dump-before=getppid) dumps: import's segment, then patch()'s.
PROGRAM = """
import json, os, time
import grpc  # what any program that patches grpc has imported, and grpc.aio with it: not fastcommon's price


def resident_kib():  # Linux's count of the pages this process has in memory
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return None


memory = resident_kib()
os.getppid()
start = time.perf_counter()
import fastcommon

imported = time.perf_counter()
os.getppid()
fastcommon.patch()
patched = time.perf_counter()
os.getppid()
grown = None if memory is None else resident_kib() - memory
print(json.dumps({"import_ms": (imported - start) * 1e3, "patch_ms": (patched - imported) * 1e3, "memory_kib": grown}))
"""


def in_fresh_processes(processes=PROCESSES):
    """{"import_ms", "patch_ms", "memory_kib"}: the median of each over ``processes`` fresh processes (also named)."""
    runs = [json.loads(subprocess.check_output([sys.executable, "-c", PROGRAM], text=True)) for _ in range(processes)]
    medians = {key: None if runs[0][key] is None else statistics.median(run[key] for run in runs) for key in runs[0]}
    return {**medians, "processes": processes}


def instructions():
    """{"import", "patch"}: the instructions of each in one process under callgrind, the whole process's."""
    from benchmarks.callgrind import self_costs

    executable = os.path.basename(os.path.realpath(sys.executable))
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "price")
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out}",
                        sys.executable, "-c", PROGRAM], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})  # fmt: skip
        dumps = sorted(name for name in os.listdir(folder) if name != "price")
        if dumps != ["price.1", "price.2", "price.3"]:
            raise RuntimeError(f"{len(dumps)} callgrind dumps, not 3: a getppid call unaccounted for")
        names = {"ob": {}, "fn": {}}
        segments = [whole_process(self_costs(f"{out}.{n}", executable, names)) for n in (1, 2, 3)]
    return {"import": segments[1], "patch": segments[2]}


def line(price):
    """The price in fresh processes, in a line."""
    memory = "" if price["memory_kib"] is None else f", {price['memory_kib'] / 1024:.1f} MiB more resident memory"
    return (f"the price, once per process (median of {price['processes']} fresh processes that imported grpc): import "
            f"fastcommon {price['import_ms']:.1f} ms, patch() {price['patch_ms']:.1f} ms{memory}")  # fmt: skip
