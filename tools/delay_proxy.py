#!/usr/bin/env python3
"""delay_proxy.py -- a TCP proxy that adds a fixed delay to each direction (a stand-in for a
network link with latency, where the kernel has no netem qdisc).

    tools/delay_proxy.py --listen HOST:PORT --to HOST:PORT|/unix/socket/path --delay-ms MS

Every chunk read from one side is written to the other side MS milliseconds after it arrived,
in order; chunks are not held back behind one another (a pipelined link, not a slow one), so a
request/response exchange costs 2*MS more than without the proxy and bandwidth is unchanged.
Prints "listening HOST:PORT" on stdout once it accepts connections; runs until killed.
"""
import argparse
import asyncio
import socket
import sys


async def pump(reader, writer, delay):
    """Copy reader -> writer, each chunk `delay` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def read_side():
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((loop.time() + delay, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            queue.put_nowait((loop.time(), b""))

    async def write_side():
        try:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    await asyncio.gather(read_side(), write_side())


async def serve(args):
    delay = args.delay_ms / 1000.0

    async def handle(c_reader, c_writer):
        sock = c_writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if args.to.startswith("/"):
                s_reader, s_writer = await asyncio.open_unix_connection(args.to)
            else:
                host, port = args.to.rsplit(":", 1)
                s_reader, s_writer = await asyncio.open_connection(host, int(port))
                s_writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP,
                                                              socket.TCP_NODELAY, 1)
        except OSError as e:
            print(f"delay_proxy: cannot reach {args.to}: {e}", file=sys.stderr)
            c_writer.close()
            return
        await asyncio.gather(pump(c_reader, s_writer, delay), pump(s_reader, c_writer, delay))

    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port))
    print(f"listening {args.listen}", flush=True)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept connections on")
    ap.add_argument("--to", required=True, help="HOST:PORT or a unix socket path to forward to")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay in ms")
    args = ap.parse_args()
    if args.delay_ms < 0:
        ap.error("--delay-ms must be 0 or more")
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
