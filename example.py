"""fastcommon in a grpc.aio server and client, ten headers a call: python example.py
(or, with no fastcommon.patch() needed: python -m fastcommon run --report example.py)."""

import asyncio

import grpc

import fastcommon


async def echo(request, context):
    sent = [key for key, _ in context.invocation_metadata() if key.startswith("x-")]  # grpc adds its user-agent
    return b"%d headers" % len(sent)


async def main():
    fastcommon.patch()  # grpc now runs fastcommon's pieces wherever grpc's own behave the same
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler("Echo", {"Say": grpc.unary_unary_rpc_method_handler(echo)})
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await channel.unary_unary("/Echo/Say")(b"hi", metadata=[(f"x-{i}", str(i)) for i in range(10)])
    print(f"{reply.decode()} received; grpc patched: {fastcommon.is_patched()}")
    await server.stop(None)


asyncio.run(main())
