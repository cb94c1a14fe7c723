"""A do-nothing ext_proc server: the same gRPC loop as the sidecar, with the
pass-through processor for every stream. The latency baseline for benchmarks.

    python -m e2e.noop_extproc --port 50052
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import grpc

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from sidecar.extproc.processor import Processor
from sidecar.extproc.service import ExternalProcessorService
from sidecar.metrics import Metrics


async def serve(host: str, port: int) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
    )
    service = ExternalProcessorService(lambda metadata, path: Processor(), Metrics())
    pb_grpc.add_ExternalProcessorServicer_to_server(service, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    print(f"NOOP_EXTPROC_PORT={bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50052)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
