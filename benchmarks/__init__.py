"""The parts of benchmark.py: the pyperf suite, messages, per RPC, charts; and instruction counts."""
