"""A small gRPC server program for `python -m fastcommon run`: it reports whether grpc is patched."""

import sys
import threading
from concurrent import futures

import grpc
from grpc import _common

import fastcommon
from grpc_support import import_stubs, make_servicer


def main():
    pb2, pb2_grpc = import_stubs(sys.argv[1])
    stop = threading.Event()

    class ReportingServicer(type(make_servicer(pb2, pb2_grpc))):
        def Unary(self, request, context):
            if request.text == "stop":
                stop.set()
            patched = _common.decode is fastcommon.decode and fastcommon.is_patched()
            return pb2.Echo(text=f"patched={patched} argv={sys.argv[1:]} name={__name__}")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb2_grpc.add_EchoServiceServicer_to_server(ReportingServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    stop.wait(timeout=120)
    server.stop(None)
    sys.exit(3)


if __name__ == "__main__":
    main()
