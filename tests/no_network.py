"""Run a script with the network cut off: `python tests/no_network.py LOG SCRIPT ARGS...`.

Every DNS lookup and every internet socket connection or datagram is refused and recorded in LOG
(the Python process only: a helper binary a library starts is not covered), so a test
can check that a run never reached for the network ("offline means offline",
minirl/infra/offline.py). The script runs as `__main__`, exactly as `python SCRIPT ARGS...` would
run it.
"""

from __future__ import annotations

import runpy
import socket
import sys

LOG = sys.argv[1]
_connect = socket.socket.connect


def record(what: object) -> None:
    with open(LOG, "a") as f:
        f.write(f"{what!r}\n")


def refuse_lookup(host: object, *args: object, **kwargs: object) -> list:
    record(("getaddrinfo", host))
    raise socket.gaierror(socket.EAI_NONAME, "network cut off by tests/no_network.py")


def refuse_connect(self: socket.socket, address: object) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        record(("connect", address))
        raise OSError("network cut off by tests/no_network.py")
    _connect(self, address)  # local sockets (AF_UNIX) are not the network


def refuse_sendto(self: socket.socket, data: bytes, *args: object) -> int:
    if self.family in (socket.AF_INET, socket.AF_INET6):  # e.g. a DNS query by hand, over UDP
        record(("sendto", args[-1]))
        raise OSError("network cut off by tests/no_network.py")
    return _sendto(self, data, *args)


_sendto = socket.socket.sendto
socket.getaddrinfo = refuse_lookup
socket.gethostbyname = socket.gethostbyname_ex = refuse_lookup
socket.socket.connect = refuse_connect
socket.socket.connect_ex = refuse_connect
socket.socket.sendto = refuse_sendto
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
