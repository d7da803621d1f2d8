# cython: language_level=3, binding=False, freethreading_compatible=True, autotestdict=False
"""MetadatumConstructor: what fastcommon puts in place of grpc's metadata entry class, cygrpc._Metadatum; its C is
metadatum.h. Not built for the Limited API (the abi3 wheel): a tuple's layout is not part of it."""

from fastcommon.counters cimport counted_calls

cdef extern from "metadatum.h":
    object fastcommon_constructor_type()

MetadatumConstructor = fastcommon_constructor_type()


def calls():
    """The calls this module counted in this process (and its parent, before a fork), by counter."""
    return counted_calls()
