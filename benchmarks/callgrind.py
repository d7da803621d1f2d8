"""Reading callgrind's counts: which part of a process each function's instructions are counted under, a dump's
costs by part, the Python side and the whole process, and the saving of one mode's runs against another's."""

import collections
import os
import statistics

PYTHON_SIDE = ("interpreter loop", "rest of libpython", "fastcommon", "Python's other modules")  # the headline
OBJECTS = (*PYTHON_SIDE, "grpc's extension", "libc", "the rest")
LIBPYTHON = ("interpreter loop", "rest of libpython")


def category(obj, function, executable):
    """Which of OBJECTS an object file and function are counted under."""
    name = os.path.basename(obj)
    if function.startswith("_PyEval_EvalFrameDefault"):
        return "interpreter loop"
    if name.startswith("libpython") or name == executable:
        return "rest of libpython"
    if "cygrpc" in name:
        return "grpc's extension"
    if name.startswith(("fast_common.", "fast_metadata.", "fast_entry.", "fast_hooks.")):  # fastcommon's modules
        return "fastcommon"
    if ".cpython-" in name or ".abi3" in name:  # CPython's _asyncio, select...; protobuf's _message
        return "Python's other modules"
    if name.startswith(("libc.so", "libc-")):
        return "libc"
    return "the rest"


def is_thread_state_lookup(obj, function):
    """Whether a function is the dynamic loader's lookup of a thread-local variable, which libpython calls to
    reach its thread state from CPython 3.12 on (a shared libpython's thread-local storage)."""
    return os.path.basename(obj).startswith("ld-linux") and function.startswith(("__tls_get_addr", "_dl_tlsdesc"))


def self_costs(path, executable, names):
    """{category: instructions} of one callgrind dump: each function's own cost, not what it called; but the
    dynamic loader's thread-local lookups that libpython calls count as libpython's (their inclusive cost, moved
    from "the rest"), as they would were libpython linked into the executable, where the lookup is inlined.

    ``names`` holds the compressed names seen so far in this process's dumps, by kind ("ob", "fn"): callgrind
    defines each once per run, in whichever dump first has it, on a line of the function or of a call to it.
    """
    current = {"ob": "", "fn": ""}
    call = {"ob": None, "fn": ""}  # the callee of the next calls= line: cob= (the caller's object when absent), cfn=
    costs = collections.Counter()
    inclusive_of = None  # the call whose inclusive cost is the next cost line: (caller's category, callee)
    with open(path, encoding="utf-8", errors="replace") as file:
        for line in file:
            if inclusive_of is not None:  # the inclusive cost of a call, counted in the callee's own lines
                caller, (callee_ob, callee_fn) = inclusive_of
                inclusive_of = None
                fields = line.split()
                if caller in LIBPYTHON and is_thread_state_lookup(callee_ob, callee_fn) and len(fields) >= 2:
                    costs[caller] += int(fields[1])
                    costs["the rest"] -= int(fields[1])
                continue
            key, equals, rest = line.partition("=")
            if equals and key in ("ob", "fn", "cob", "cfn"):
                kind, rest = key[-2:], rest.strip()
                name = rest
                if rest.startswith("("):
                    ident, _, name = rest.partition(")")
                    name = name.strip() or names[kind].get(ident, "")
                    names[kind][ident] = name
                (current if key == kind else call)[kind] = name  # ob=, fn=: the cost lines' context; cob=, cfn=
            elif line.startswith("calls="):
                callee = (call["ob"] or current["ob"], call["fn"])
                inclusive_of = category(current["ob"], current["fn"], executable), callee
                call["ob"] = None
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
    return sum(costs.get(name, 0) for name in OBJECTS)


def whole_process_saving(stock, patched):
    """The headline of stock runs against patched ones ({category: instructions per RPC} each): the saving on the
    Python side, its share of the whole process's stock instructions and of the Python side's, and the range of
    the first over every pair of a stock run and a patched one."""
    stock_python, patched_python = [python_side(c) for c in stock], [python_side(c) for c in patched]
    stock_whole = statistics.fmean(whole_process(c) for c in stock)
    saved = statistics.fmean(stock_python) - statistics.fmean(patched_python)
    shares = [(python_side(s) - p) / whole_process(s) for s in stock for p in patched_python]
    return {
        "stock": stock_whole,
        "saved": saved,
        "share": saved / stock_whole,
        "low": min(shares),
        "high": max(shares),
        "python_share": saved / statistics.fmean(stock_python),
    }
