#!/usr/bin/env python3
"""usage: hostile_job.py WEFT COMM_CHECK

A 4-rank job over TCP forms and runs its collectives while a stranger holds 1,000
half-open connections (connected, never speaking) to the job's store port, opened as soon
as the store listens. The job must succeed; prints the job's wall time with and without the
stranger (the difference is what the stranger costs). The ranks' peer ports live too briefly
to be hit from outside reliably: test_comm's Handshake.SilentConnectionsDoNotDelayPeers holds
silent connections against the peers' accept loop directly.
"""
import os
import socket
import subprocess
import sys
import threading
import time

WEFT, CHECK = sys.argv[1], sys.argv[2]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def job(port):
    env = dict(os.environ, WEFT_TRANSPORT="tcp", WEFT_JOB_TOKEN="hostile-job-token-0123456789abcdef",
               WEFT_RENDEZVOUS_TIMEOUT="60")
    t0 = time.monotonic()
    r = subprocess.run([WEFT, "launch", "--nproc-per-node", "4", "--master-port", str(port), "--", CHECK, "collectives"],
                       env=env, capture_output=True, text=True, timeout=300)
    return r, time.monotonic() - t0


def main():
    port = free_port()
    clean, clean_s = job(port)
    if clean.returncode != 0:
        sys.exit(f"FAIL: the job failed without a stranger:\n{clean.stdout}\n{clean.stderr}")
    held, stop = [], threading.Event()
    hits = {"store": 0}

    def stranger(store_port):
        # The store: 1,000 half-open connections as soon as it listens.
        while len(held) < 1000 and not stop.is_set():
            try:
                held.append(socket.create_connection(("127.0.0.1", store_port), timeout=1))
                hits["store"] += 1
            except OSError:
                time.sleep(0.001)
        stop.wait()

    port = free_port()
    t = threading.Thread(target=stranger, args=(port,))
    t.start()
    hostile, hostile_s = job(port)
    stop.set()
    t.join()
    for s in held:
        s.close()
    print(f"without the stranger: {clean_s:.2f} s; with it: {hostile_s:.2f} s "
          f"({hits['store']} half-open connections to the store)")
    if hostile.returncode != 0:
        sys.exit(f"FAIL: the job failed with a stranger connected:\n{hostile.stdout[-2000:]}\n{hostile.stderr[-2000:]}")
    if hits["store"] < 1000:
        sys.exit(f"FAIL: the stranger held only {hits['store']} connections to the store")
    print("ok")


main()
