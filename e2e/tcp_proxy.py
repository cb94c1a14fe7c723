"""A TCP relay in front of a server, to take the server away and bring it back.

    python -m e2e.tcp_proxy --listen PORT --target HOST:PORT

Killing this process resets every connection through it and refuses new ones, as a
server that went down would; starting it again on the same port is the server coming
back with its data (what a restart with persistent storage gives its clients). The
tests use it for a Milvus server outage mid-traffic: the ``milvus`` wheel's own
server does not start again on its data directory here (docs/design/milvus-server.md).
Prints ``PROXY_READY port=N`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

CHUNK = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def serve(listen_port: int, host: str, port: int) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", listen_port, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"PROXY_READY port={bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", required=True, help="HOST:PORT")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, host or "127.0.0.1", int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
