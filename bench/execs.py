"""Write every program start on this machine, and the end of each process that started one,
to a file, until killed: `exec SECONDS PID COMMAND LINE` and `exit SECONDS PID`, with the
kernel's times (CLOCK_MONOTONIC, given as realtime seconds). From the kernel's process
events connector (netlink), as root: nothing is traced or slowed, so runtimes written in
C and in Python are seen alike (bench/grant.sh). Exits with 1, saying why, when the kernel
gives no such events.

Usage: execs.py OUTPUT
"""

import os
import socket
import struct
import sys
import time

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
NLMSG_DONE = 3
PROC_EVENT_EXEC = 0x00000002
PROC_EVENT_EXIT = 0x80000000
NLMSG_HEADER = struct.Struct("=IHHII")
CN_MSG_HEADER = struct.Struct("=IIIIHH")  # id (idx, val), seq, ack, len, flags
EVENT_HEADER = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
PIDS = struct.Struct("=II")  # pid, tgid (first in both the exec and the exit event)
SPACES = bytes.maketrans(b"\0\n\r", b"   ")  # a command line on one line


def listen() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    sock.bind((os.getpid(), CN_IDX_PROC))
    payload = CN_MSG_HEADER.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, 4, 0) + struct.pack(
        "=I", PROC_CN_MCAST_LISTEN
    )
    sock.send(
        NLMSG_HEADER.pack(NLMSG_HEADER.size + len(payload), NLMSG_DONE, 0, 0, os.getpid()) + payload
    )
    return sock


def main() -> None:
    try:
        sock = listen()
    except OSError as exc:
        print(f"execs.py: no process events from the kernel: {exc}", file=sys.stderr)
        sys.exit(1)
    offset = time.time_ns() - time.monotonic_ns()
    started: set[int] = set()
    with open(sys.argv[1], "w", buffering=1) as out:
        while True:
            data = sock.recv(4096)
            event = data[NLMSG_HEADER.size + CN_MSG_HEADER.size :]
            what, _cpu, stamp = EVENT_HEADER.unpack_from(event)
            pid, tgid = PIDS.unpack_from(event, EVENT_HEADER.size)
            seconds = (stamp + offset) / 1e9
            if what == PROC_EVENT_EXEC:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as stream:
                        line = stream.read(1000).translate(SPACES).decode(errors="replace")
                except OSError:  # gone already
                    continue
                started.add(pid)
                out.write(f"exec {seconds:.6f} {pid} {line}\n")
            elif what == PROC_EVENT_EXIT and pid == tgid and pid in started:
                started.discard(pid)
                out.write(f"exit {seconds:.6f} {pid}\n")


if __name__ == "__main__":
    main()
