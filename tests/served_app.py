"""A small gRPC server program for `python -m fastcommon run`: it reports whether grpc is patched."""

import sys

from grpc import _common

import fastcommon
from grpc_echo import echo_server, import_stubs, make_servicer


def main():
    pb2, pb2_grpc = import_stubs(sys.argv[1])

    class ReportingServicer(type(make_servicer(pb2, pb2_grpc))):
        def Unary(self, request, context):
            patched = _common.decode is fastcommon.decode and fastcommon.is_patched()
            return pb2.Echo(text=f"patched={patched} argv={sys.argv[1:]} name={__name__}")

    with echo_server(pb2, pb2_grpc, max_workers=2, servicer=ReportingServicer()) as address:
        print(address.rsplit(":", 1)[1], flush=True)
        sys.stdin.read()  # serves until stdin closes: no RPC is in flight when the server stops
    sys.exit(3)


if __name__ == "__main__":
    main()
