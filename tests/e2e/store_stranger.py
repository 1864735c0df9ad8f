"""A process without the run's token against the rendezvous store, for the e2e
tests: it speaks the store's protocol (docs/formats.md) or none at all.

    store_stranger.py read HOST PORT     presents the default token; fails if it reads a key
    store_stranger.py plant HOST PORT    presents the default token; plants keys where let in
    store_stranger.py torch HOST PORT    PyTorch's TCPStore as a client; fails unless turned away
    store_stranger.py byte HOST PORT S   sends one byte and waits S seconds
    store_stranger.py big HOST PORT      announces a 100 MiB message; fails unless closed early
    store_stranger.py silent PORT S      listens on 127.0.0.1:PORT and never answers, for S seconds
"""
import hashlib
import socket
import struct
import sys
import time

DEFAULT_SPACE = "acc/" + hashlib.sha1(b"accordion run token, keys: ").hexdigest()[:20] + "/"
KEYS = ["acc/run", "acc/refused", "acc/pg/0/0", "acc/pg/0/1"] + [
    DEFAULT_SPACE + k for k in ("member/0", "member/1", "pg/0/0", "pg/0/1", "pg/0/rank_0", "pg/0/rank_1")]


def text(data):
    return struct.pack("<I", len(data)) + data


def call(sock, body):
    sock.sendall(struct.pack("<I", len(body)) + body)
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None  # closed
    (length,) = struct.unpack("<I", head)
    return sock.recv(length, socket.MSG_WAITALL)


def hello(host, port):
    """A connection that presented the default token; None where turned away."""
    sock = socket.create_connection((host, port), 10)
    digest = hashlib.sha1(b"accordion run token, store: ").hexdigest().encode()
    reply = call(sock, bytes([1]) + struct.pack("<I", 0x31434341) + text(digest))
    if reply != bytes([0]):
        sock.close()
        return None
    return sock


def main(argv):
    action = argv[1]
    if action == "silent":
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", int(argv[2])))
        server.listen(16)
        time.sleep(float(argv[3]))
        return 0
    host, port = argv[2], int(argv[3])
    if action == "byte":
        sock = socket.create_connection((host, port), 10)
        sock.sendall(b"\0")
        time.sleep(float(argv[4]))
        return 0
    if action == "big":
        sock = socket.create_connection((host, port), 10)
        start = time.monotonic()
        try:
            sock.sendall(struct.pack("<I", 100 << 20) + bytes(100 << 20))
        except OSError:
            print(f"closed after {time.monotonic() - start:.2f} s")
            return 0
        return "the store took a 100 MiB message from a process without the token"
    if action == "torch":
        from datetime import timedelta
        from torch.distributed import TCPStore
        try:
            TCPStore(host, port, None, False, timedelta(seconds=10)).add("acc/run", 1)
        except (RuntimeError, OSError) as e:
            print("turned away:", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return 0
        return "PyTorch's TCPStore client added to a key"
    sock = hello(host, port)
    if sock is None:
        print("turned away")
        return 0
    for key in KEYS:
        if action == "read":
            reply = call(sock, bytes([3]) + text(key.encode()))
            if reply and len(reply) > 1 and reply[1]:
                return "the stranger read " + key
        else:
            call(sock, bytes([2]) + text(key.encode()) + text(b"planted by a stranger"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
