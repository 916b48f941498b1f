"""Shared by bench/allreduce_vs_mpi, bench/tcp_ceiling and others: run a command, and read
the JSON lines that weft comm-bench --json and the MPI and gloo harnesses print (one per size,
maybe behind weft launch's "[rank] " prefix) into {bytes: busbw in GB/s}; the --late flag of
the PyTorch harnesses."""
import argparse, json, os, subprocess, sys


def run(cmd, env=None):
    """The command's standard output; exits with its error output when it fails."""
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def rows(text):
    """{bytes: busbw_gbps} of the JSON lines; exits when a size reports wrong results."""
    res = {}
    for line in text.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("wrong", 0):
                sys.exit(f"error: wrong results at {r['bytes']} bytes")
            res[r["bytes"]] = r["busbw_gbps"]
    return res


def late_arg(text):
    """argparse type of --late RANK:US (a straggler): (rank, seconds)."""
    rank, _, us = text.partition(":")
    if not (rank.isdigit() and us.isdigit()):
        raise argparse.ArgumentTypeError(f"'{text}' is not RANK:MICROSECONDS (whole numbers)")
    return int(rank), int(us) / 1e6


def busbw(cmd):
    return rows(run(cmd))
