"""Count instructions per call with valgrind's callgrind: deterministic where timings are noise.

    python benchmarks/instructions.py [--python PYTHON ...] [--calls N]

Each interpreter given (default: this one; it needs fastcommon and grpcio installed)
runs once under callgrind. For every case it calls the function N and then 2N times
in a loop, with a marker call after each run (os.getppid: callgrind dumps its counters
when libc's getppid is entered, a symbol every build has, stripped ones included);
(count(2N) - count(N)) / N is the cost of one loop iteration, and the same for an empty
loop body is subtracted. The conversions' input is the registry's METHOD_NAME (40 ASCII bytes); the metadata
entry's, its USER_AGENT header; grpc's hooks are called as grpc calls them, with an event loop running, on a grpc.aio
servicer's method.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
import types

# Run as a script: the project's top (benchmarks/, grpc_echo/) goes first on sys.path, as benchmark.py has it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.callgrind import OBJECTS, self_costs
from benchmarks.timing import AIO_METADATA, IMPLEMENTATIONS, Progress
from fastcommon._registry import METHOD_NAME, USER_AGENT

CASES = (  # label, function name, input
    ("encode(str)", "encode", METHOD_NAME),
    ("encode(bytes)", "encode", METHOD_NAME.encode()),
    ("decode(bytes)", "decode", METHOD_NAME.encode()),
    ("decode(str)", "decode", METHOD_NAME),
)
FLOOR = "callable(x)"
METADATUM_CASES = ("grpc's _Metadatum(k, v)", "fastcommon's constructor(k, v)", "a plain tuple (k, v)")
COMPILED = IMPLEMENTATIONS[-1]
MARKER = "getppid"
# Callgrind's three dumps of a case take about what 5 ms of a run without callgrind do (measured on 2 cores, where
# callgrind ran 80-90 times slower): what the estimates add to each case's own time.
DUMPS_COST = 0.005


class FromC:
    """A function called from C, as grpc's Cython core calls the metadata entry: deque(map(f, keys, values), 0)."""

    def __init__(self, function):
        self.function = function


FROM_C = ("grpc's _Metadatum", "fastcommon's constructor", "counted (--report)", "operator.is_, a builtin of two")


class Entered:
    """A context manager's cost, in its with-block: ``with f(*args): pass``, as grpc uses get_plugin()."""

    def __init__(self, function):
        self.function = function


HOOK_CASES = (  # label, the hook's name, its arguments: none, an async method, or a servicer context's (None)
    ("with get_plugin()", "get_plugin", ""),
    ("with _create_servicer_context(...)", "_create_servicer_context", "none"),
    ("_get_running_loop()", "_get_running_loop", ""),
    ("_is_async_handler(an async method)", "_is_async_handler", "method"),
)


class MetadataPath:
    """What a grpc.aio call does with its metadata, timed in the loop itself: tuple(init_metadata(m, None))."""

    def __init__(self, init_metadata):
        self.init_metadata = init_metadata


def child(calls):
    """Run the marked loops; the parent reads the counters callgrind dumped."""
    import importlib
    import operator
    from collections import deque
    from itertools import repeat

    from grpc._cython import cygrpc

    def runner(function, *arguments):
        if function is None:

            def run(n):
                for _ in repeat(None, n):
                    pass
        elif function is tuple and len(arguments) == 2:  # the metadata entry's floor: built in place, no call

            def run(n, k=arguments[0], v=arguments[1]):
                for _ in repeat(None, n):
                    (k, v)  # noqa: B018
        elif isinstance(function, FromC):

            def run(n, f=function.function, k=arguments[0], v=arguments[1]):
                deque(map(f, repeat(k, n), repeat(v, n)), 0)
        elif isinstance(function, Entered):

            def run(n, f=function.function, a=arguments):
                for _ in repeat(None, n):
                    with f(*a):
                        pass
        elif not arguments:

            def run(n, f=function):
                for _ in repeat(None, n):
                    f()
        elif isinstance(function, MetadataPath):

            def run(n, f=function.init_metadata, m=arguments[0]):
                for _ in repeat(None, n):
                    tuple(f(m, None))
        elif len(arguments) == 2:

            def run(n, f=function, k=arguments[0], v=arguments[1]):
                for _ in repeat(None, n):
                    f(k, v)
        else:

            def run(n, f=function, x=arguments[0]):
                for _ in repeat(None, n):
                    f(x)

        # Its own code object, and so its own call site: one the specializing interpreter (3.11 on) adapts to this
        # case alone, as a real call site adapts to the one callable it calls, rather than one shared by every case
        # this branch makes, which it would specialize to the first and fall back to a generic call for the others.
        code = run.__code__.replace()
        return types.FunctionType(code, run.__globals__, run.__name__, run.__defaults__, run.__closure__)

    measured = [("loop", None, ()), (FLOOR, callable, (METHOD_NAME,))]
    for module_name in IMPLEMENTATIONS:
        module = importlib.import_module(module_name)
        measured += [(f"{module_name} {label}", getattr(module, name), (x,)) for label, name, x in CASES]
    compiled = importlib.import_module(COMPILED)
    measured += [(f"counted {label}", getattr(compiled.Counted(0), name), (x,)) for label, name, x in CASES]
    measured += [(METADATUM_CASES[0], cygrpc._Metadatum, USER_AGENT), (METADATUM_CASES[2], tuple, USER_AGENT)]
    from grpc.aio._channel import _BaseMultiCallable

    import fastcommon

    path = MetadataPath
    for label, metadata in AIO_METADATA.items():  # grpc's own first; fastcommon's after patch(), below
        measured += [(f"{label} | grpc.aio", path(_BaseMultiCallable._init_metadata), (metadata,))]
        measured += [(f"{label} | floor", tuple, (metadata or (),))]
    entry = fastcommon._implementation.compiled.get("fast_entry")  # none in a Limited API (abi3) build
    if entry is not None:
        constructor = entry.MetadatumConstructor
        measured += [(METADATUM_CASES[1], constructor(cygrpc._Metadatum), USER_AGENT)]
        measured += [("counted metadatum", constructor(cygrpc._Metadatum, counter=0), USER_AGENT)]
        from_c = (cygrpc._Metadatum, constructor(cygrpc._Metadatum), constructor(cygrpc._Metadatum, counter=0))
        measured += [
            (f"from C: {label}", FromC(f), USER_AGENT) for label, f in zip(FROM_C, (*from_c, operator.is_), strict=True)
        ]

    import asyncio

    from grpc import _observability

    class Servicer:
        async def method(self, request, context):
            pass

    import grpc

    grpcs = {name: getattr(cygrpc, name, None) for _, name, _ in HOOK_CASES}
    grpcs |= {"get_plugin": _observability.get_plugin, "_create_servicer_context": grpc._create_servicer_context}
    grpcs = {name: own for name, own in grpcs.items() if own is not None}  # _get_running_loop from 1.80 on
    hooks = fastcommon._implementation.compiled.get("fast_hooks")  # not in pure Python
    for label, name, argument in (case for case in HOOK_CASES if case[1] in grpcs):
        for who, hook in (("grpc", grpcs[name]), ("fastcommon", hooks and hooks.hooks(grpcs)[name])):
            if hook is not None:
                made = Entered(hook) if label.startswith("with") else hook
                arguments = {"": (), "method": (Servicer().method,), "none": (None, None, None)}[argument]
                measured += [(f"{label} | {who}", made, arguments)]

    def measure(cases):
        for label, function, arguments in cases:
            started = time.perf_counter()
            run = runner(function, *arguments)  # specialized by the warm-up
            run(1000)
            os.getppid()
            run(calls)
            os.getppid()
            run(2 * calls)
            os.getppid()
            print(f"{time.perf_counter() - started:.6f} {label}", flush=True)  # in the order of the dumps, as they come

    aio_path = "fast_metadata" in fastcommon._implementation.compiled  # not in pure Python
    print(len(measured) + (len(AIO_METADATA) if aio_path else 0), flush=True)  # started: how many cases
    asyncio._set_running_loop(asyncio.new_event_loop())  # as grpc.aio's calls find it
    measure(measured)
    asyncio._set_running_loop(None)
    if aio_path:
        with fastcommon.patched():
            measure([(f"{label} | fastcommon", path(_BaseMultiCallable._init_metadata), (metadata,))
                     for label, metadata in AIO_METADATA.items()])  # fmt: skip


def dump_total(path):
    with open(path) as file:
        for line in file:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"no total in {path}")


def count(python, calls):
    """Instructions per call for each case, loop overhead subtracted, for one interpreter."""
    child, environ = [python, os.path.abspath(__file__), "--child", str(calls)], {**os.environ, "PYTHONHASHSEED": "0"}
    native = subprocess.run(child, capture_output=True, text=True, env=environ)
    if native.returncode != 0:
        sys.exit(f"{python} failed:\n{native.stderr[-3000:]}")
    weights = [float(line.split(" ", 1)[0]) + DUMPS_COST for line in native.stdout.splitlines()[1:]]

    def start(count):  # the estimates, from when the child under callgrind starts its cases
        return Progress(f"instructions.py, {python}", count, "cases", f" under callgrind, {calls:,} calls and then "
                        "twice that many each; each case weighed by its time in a run without callgrind, and its dumps",
                        weights=weights)  # fmt: skip

    with tempfile.TemporaryDirectory() as out, open(f"{out}/stderr", "w+", encoding="utf-8") as errors:
        command = ["valgrind", "--tool=callgrind", f"--dump-before={MARKER}", f"--callgrind-out-file={out}/cg.out",
                   *child]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=environ)
        labels = follow(process.stdout, start)
        if process.wait() != 0:
            errors.seek(0)
            sys.exit(f"{python} under callgrind failed:\n{errors.read()[-3000:]}")
        dumps = sorted(glob.glob(f"{out}/cg.out.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        totals = [dump_total(p) for p in dumps]
        if len(totals) < 3 * len(labels):
            sys.exit(f"{python}: callgrind dumped {len(totals)} times, not 3 per case: it never saw libc's {MARKER}")
        # Where a grpc.aio call's metadata path runs: callgrind names each object and function once a run, in
        # the first dump that has it, so every dump is read, in order.
        executable, names = os.path.basename(os.path.realpath(python)), {"ob": {}, "fn": {}}
        segments = [self_costs(dump, executable, names) for dump in dumps[: 3 * len(labels)]]
    # Dumps come in threes per case (warm-up, N, 2N); the last file is the rest of the run.
    per_iteration = {label: (totals[3 * i + 2] - totals[3 * i + 1]) / calls for i, label in enumerate(labels)}
    loop = per_iteration.pop("loop")
    costs = {label: cost - (0 if label.startswith("from C") else loop) for label, cost in per_iteration.items()}
    for i, label in enumerate(labels):
        if label.startswith(tuple(AIO_METADATA)):
            costs[f"{label} | where"] = {
                name: (segments[3 * i + 2][name] - segments[3 * i + 1][name]) / calls for name in OBJECTS
            }
    return costs


def follow(lines, start):
    """The labels of the cases the child measured, as it prints them, each with a progress line; ``start(count)``
    makes the progress from the child's first line, the number of cases."""
    lines = iter(lines)
    count = next(lines, None)
    if count is None:  # it failed before it began
        return []
    progress, labels = start(int(count)), []
    for line in lines:
        labels.append(line.rstrip("\n").split(" ", 1)[1])
        progress.step(f" ({labels[-1]})")
    return labels


def version_of(python):
    code = (
        "import sys, grpc, fastcommon.fast_common as m; "
        "print('%d.%d.%d' % sys.version_info[:3], grpc.__version__, "
        "'abi3' if m.LIMITED_API else 'per-version')"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def table(python, calls):
    costs = count(python, calls)
    floor = costs[FLOOR]
    python_version, grpc_version, build = version_of(python)
    lines = [
        f"CPython {python_version} ({python}), grpcio {grpc_version}, fastcommon's {build} build: instructions "
        f"per call (callgrind, {calls:,} calls, loop subtracted); floor {FLOOR} = {floor:.1f}",
        "",
        "| case | grpc._common | fastcommon.common | fast_common | fast_common / grpc | fast_common / floor "
        "| counted (--report) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, _, _ in CASES:
        grpc_cost, py_cost, cy_cost = (costs[f"{m} {label}"] for m in IMPLEMENTATIONS)
        lines.append(
            f"| {label} | {grpc_cost:.1f} | {py_cost:.1f} | {cy_cost:.1f} | "
            f"{cy_cost / grpc_cost:.2f} | {cy_cost / floor:.2f} | {costs[f'counted {label}']:.1f} |"
        )
    stock, ours, plain = (costs.get(case) for case in METADATUM_CASES)
    lines += ["", "| metadata entry | instructions | / grpc's |", "|---|---:|---:|"]
    for case, value in zip(METADATUM_CASES, (stock, ours, plain), strict=False):
        shown = "n/a: this build leaves _Metadatum to grpc" if value is None else f"{value:.1f} | {value / stock:.2f}"
        lines.append(f"| {case} | {shown} |")
    if ours is not None:
        lines.append(
            f"| counted (--report) | {costs['counted metadatum']:.1f} | {costs['counted metadatum'] / stock:.2f} |"
        )
    if ours is not None:
        lines += ["", "| called from C, as grpc's core calls it: deque(map(f, keys, values), 0) | per item |"]
        lines.append("|---|---:|")
        lines += [f"| {label} | {costs[f'from C: {label}']:.1f} |" for label in FROM_C]
    lines += [
        "",
        "| a grpc.aio call's metadata: tuple(_init_metadata(metadata, None)) | grpc.aio | fastcommon | / grpc's "
        "| floor: tuple(metadata) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in AIO_METADATA:
        grpcs, ours, floor = (costs.get(f"{label} | {who}") for who in ("grpc.aio", "fastcommon", "floor"))
        compiled = "n/a | n/a" if ours is None else f"{ours:.1f} | {ours / grpcs:.2f}"
        lines.append(f"| {label} | {grpcs:.1f} | {compiled} | {floor:.1f} |")
    lines += ["", "| grpc's hooks, a call | grpc | fastcommon | / grpc's |", "|---|---:|---:|---:|"]
    for label, _, _ in HOOK_CASES:
        grpcs, ours = (costs.get(f"{label} | {who}") for who in ("grpc", "fastcommon"))
        if grpcs is not None:
            compiled = "n/a | n/a" if ours is None else f"{ours:.1f} | {ours / grpcs:.2f}"
            lines.append(f"| {label} | {grpcs:.1f} | {compiled} |")
    lines += ["", f"| where the path runs, per call (the loop's own few in the first column) | {' | '.join(OBJECTS)} |"]
    lines.append("|---|" + "---:|" * len(OBJECTS))
    for label in AIO_METADATA:
        for who in ("grpc.aio", "fastcommon"):
            where = costs.get(f"{label} | {who} | where")
            if where is not None:
                lines.append(f"| {label}, {who} | " + " | ".join(f"{where[name]:,.0f}" for name in OBJECTS) + " |")
    return "\n".join(lines)


def main():
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="interpreter to measure (repeatable); default: this one")
    parser.add_argument("--calls", type=int, default=20000, help="N, the calls per measured loop (default 20000)")
    args = parser.parse_args()
    for python in args.python or [sys.executable]:
        print(table(python, args.calls))
        print()


if __name__ == "__main__":
    main()
