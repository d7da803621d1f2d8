"""Reading callgrind's counts: which part of a process each function's instructions are counted under, a dump's
costs by part, the Python side and the whole process, and the saving of one mode's runs against another's."""

import collections
import os
import statistics

PYTHON_SIDE = ("interpreter loop", "rest of libpython", "fastcommon", "Python's other modules")  # the headline
OBJECTS = (*PYTHON_SIDE, "grpc's extension", "libc", "the rest")


def category(obj, function, executable):
    """Which of OBJECTS an object file and function are counted under."""
    name = os.path.basename(obj)
    if function.startswith("_PyEval_EvalFrameDefault"):
        return "interpreter loop"
    if name.startswith("libpython") or name == executable:
        return "rest of libpython"
    if "cygrpc" in name:
        return "grpc's extension"
    if "fast_common" in name:
        return "fastcommon"
    if ".cpython-" in name or name.endswith(".abi3.so"):  # CPython's _asyncio, select...; protobuf's _message
        return "Python's other modules"
    if name.startswith(("libc.so", "libc-")):
        return "libc"
    return "the rest"


def self_costs(path, executable, names):
    """{category: instructions} of one callgrind dump: each function's own cost, not what it called.

    ``names`` holds the compressed names seen so far in this process's dumps, by kind ("ob", "fn"): callgrind
    defines each once per run, in whichever dump first has it, on a line of the function or of a call to it.
    """
    current = {"ob": "", "fn": ""}
    costs = collections.Counter()
    skip_next = False
    with open(path, encoding="utf-8", errors="replace") as file:
        for line in file:
            if skip_next:  # the inclusive cost of a call, counted in the callee's own lines
                skip_next = False
                continue
            key, equals, rest = line.partition("=")
            if equals and key in ("ob", "fn", "cob", "cfn"):
                kind, rest = key[-2:], rest.strip()
                name = rest
                if rest.startswith("("):
                    ident, _, name = rest.partition(")")
                    name = name.strip() or names[kind].get(ident, "")
                    names[kind][ident] = name
                if key == kind:  # ob=, fn=: the context of the cost lines below; cob=, cfn=: only a call's
                    current[kind] = name
            elif line.startswith("calls="):
                skip_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if len(fields) >= 2:
                    costs[category(current["ob"], current["fn"], executable)] += int(fields[1])
    return costs


def python_side(costs):
    """The instructions the headline counts, out of one process's {category: instructions}: the Python side's."""
    return sum(costs.get(name, 0) for name in PYTHON_SIDE)


def whole_process(costs):
    """All the instructions of one process's {category: instructions}."""
    return sum(costs.values())


def saving(stock, patched):
    """(saved, its share, lowest share, highest share): of the means, and the range of every stock run against
    every patched one."""
    mean_stock, mean_patched = statistics.fmean(stock), statistics.fmean(patched)
    shares = [(s - p) / s for s in stock for p in patched]
    return mean_stock - mean_patched, (mean_stock - mean_patched) / mean_stock, min(shares), max(shares)
