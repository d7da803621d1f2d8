"""An echo service to try adoption on, from a checkout: python -m fastcommon run --report -m grpc_echo.service 2000

Its server runs in a multiprocessing (spawn) worker; the main process makes N unary RPCs to it, each
with ten request headers, then stops the server. Under `run`, both processes are patched; with
--report, each prints what it saved as it exits (the server first).
"""

import multiprocessing
import sys
import tempfile

from grpc_echo import REQUEST_HEADERS, echo_server, generate_stubs, import_stubs


def serve(stubs_dir, address_queue, stop):
    pb2, pb2_grpc = import_stubs(stubs_dir)
    with echo_server(pb2, pb2_grpc) as address:
        address_queue.put(address)
        stop.wait()


def main(rpcs):
    import grpc

    with tempfile.TemporaryDirectory() as stubs_dir:
        pb2, pb2_grpc = generate_stubs(stubs_dir)
        context = multiprocessing.get_context("spawn")
        address_queue, stop = context.Queue(), context.Event()
        server = context.Process(target=serve, args=(stubs_dir, address_queue, stop))
        server.start()
        try:
            with grpc.insecure_channel(address_queue.get(timeout=120)) as channel:
                stub = pb2_grpc.EchoServiceStub(channel)
                for _ in range(rpcs):
                    stub.Unary(pb2.Echo(text="hello"), metadata=REQUEST_HEADERS, timeout=30)
        finally:
            stop.set()
            server.join(timeout=120)
    print(f"{rpcs} RPCs made; the server exited with {server.exitcode}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
