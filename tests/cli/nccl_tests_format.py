#!/usr/bin/env python3
"""weft comm-bench speaks nccl-tests' output format: this test reads it with a parser written
for nccl-tests' tables (as the scripts that collect nccl-tests results read them: '#' lines
are comments, a result row is size, count, type, redop, root, then time, algbw, busbw and
#wrong out of place and in place; the footer carries '# Out of bounds values' and '# Avg bus
bandwidth'), and checks what the numbers must satisfy.

usage: nccl_tests_format.py WEFT"""
import json
import os
import re
import subprocess
import sys

WEFT = sys.argv[1]
ELEMENT = {"int32": 4, "int64": 8, "half": 2, "float": 4, "double": 8, "bfloat16": 2}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


# --- the parser: nccl-tests' format, nothing weft-specific ---
def number(field):
    return None if field == "N/A" else float(field)


def parse_nccl_tests(text):
    """{'rows': [...], 'oob': int, 'oob_status': str, 'avg_busbw': float or None}"""
    rows, out = [], {"oob": None, "avg_busbw": None}
    for line in text.splitlines():
        m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)", line)
        if m:
            out["oob"], out["oob_status"] = int(m.group(1)), m.group(2)
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)\s*(\w*)", line)
        if m:
            out["avg_busbw"] = number(m.group(1))
            out["bw_status"] = m.group(2)
            continue
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4])}
        for side, at in (("out", 5), ("in", 9)):
            row[side] = {"time": number(f[at]), "algbw": number(f[at + 1]), "busbw": number(f[at + 2]),
                         "wrong": None if f[at + 3] == "N/A" else int(f[at + 3])}
        row["extra"] = f[13:]
        rows.append(row)
    out["rows"] = rows
    return out


def bench(ranks, *flags, env=None, expect_rc=0):
    cmd = [WEFT, "launch", "--nproc-per-node", str(ranks), "--no-prefix", "--", "weft", "comm-bench", *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)
    check(res.returncode == expect_rc, f"{' '.join(flags)}: exit {res.returncode}, wanted {expect_rc}: {res.stderr[-500:]}")
    return parse_nccl_tests(res.stdout), res.stdout


def factor(op, w):
    return {"allreduce": 2 * (w - 1) / w, "broadcast": 1, "reduce": 1, "sendrecv": 1}.get(op, (w - 1) / w)


def check_rows(name, parsed, op, w, in_place=True, total_sized=False):
    rows = parsed["rows"]
    check(len(rows) > 0, f"{name}: no rows")
    busbws = []
    for r in rows:
        es = ELEMENT[r["type"]]
        check(r["size"] == r["count"] * es * (w if total_sized else 1), f"{name}: size {r['size']} vs count {r['count']}")
        for side in ("out", "in"):
            s = r[side]
            if side == "in" and not in_place:
                check(s["time"] is None, f"{name}: an in-place column where there is none")
                continue
            check(s["wrong"] == 0, f"{name}: {s['wrong']} wrong at {r['size']} B {r['type']} {r['redop']} ({side})")
            check(s["time"] is not None and s["time"] > 0, f"{name}: no time")
            # algbw = size / time (GB/s = B/ns); busbw = algbw x the collective's factor. Both are
            # printed with two decimals.
            # The time column is rounded too (to 0.01, 0.1 or 1 us as it grows, as nccl-tests
            # prints it): allow what that rounding moves algbw by.
            half_unit = 0.005 if s["time"] < 100 else 0.05 if s["time"] < 10000 else 0.5
            check(abs(s["algbw"] - r["size"] / (s["time"] * 1e3)) <= 0.006 + s["algbw"] * half_unit / s["time"] * 1.01,
                  f"{name}: algbw {s['algbw']} is not size/time at {r['size']} B")
            check(abs(s["busbw"] - s["algbw"] * factor(op, w)) <= 0.011, f"{name}: busbw {s['busbw']} vs algbw {s['algbw']}")
            busbws.append(s["busbw"])
    check(parsed["oob"] == 0 and parsed["oob_status"] == "OK", f"{name}: out of bounds values {parsed['oob']}")
    check(parsed["avg_busbw"] is not None and abs(parsed["avg_busbw"] - sum(busbws) / len(busbws)) <= 0.006,
          f"{name}: Avg bus bandwidth {parsed['avg_busbw']} is not the mean of the busbw column")
    return rows


# Every type and reduction of all-reduce, out of place and in place, 2 ranks.
p, text = bench(2, "-b", "8", "-e", "64K", "-f", "32", "-d", "all", "-o", "all", "-n", "2", "-w", "1")
rows = check_rows("allreduce", p, "allreduce", 2)
# nccl-tests' 13 columns exactly (parsers count them from either end); weft's algorithm per
# size in a comment line after the footer.
check(all(not r["extra"] for r in rows), f"allreduce: columns beyond nccl-tests': {rows[0]['extra']}")
algorithms = re.search(r"^# Algorithms\s*: (.+)$", text, re.M)
check(algorithms is not None and re.fullmatch(r"(\d+(-\d+)? B \w+)(; \d+(-\d+)? B \w+)*", algorithms.group(1)),
      f"allreduce: no '# Algorithms' line naming each size's algorithm: {algorithms and algorithms.group(0)}")
check({r["type"] for r in rows} == set(ELEMENT), f"allreduce: types {sorted({r['type'] for r in rows})}")
check({r["redop"] for r in rows} == {"sum", "prod", "max", "min", "avg"}, "allreduce: -o all")
check(all(r["root"] == -1 for r in rows), "allreduce: root is -1 for a collective without one")

# nccl-tests' names and flags: reduce_scatter in bfloat16 on 3 ranks (in place: the input is
# the whole buffer and each rank's block of it the output).
p, _ = bench(3, "--op", "reduce_scatter_perf", "-b", "96", "-e", "96K", "-f", "32", "-d", "bfloat16", "-o", "max",
             "-n", "2", "-w", "1")
check_rows("reduce_scatter", p, "reduce_scatter", 3, total_sized=True)

# Rooted collectives carry their root.
for op in ("broadcast", "reduce", "gather", "scatter"):
    p, _ = bench(3, "--op", op, "-r", "2", "-b", "1K", "-e", "4K", "-f", "4", "-d", "half", "-n", "2", "-w", "1")
    rows = check_rows(op, p, op, 3, total_sized=op in ("gather", "scatter"))
    check(all(r["root"] == 2 for r in rows), f"{op}: root column")
    check(all(r["redop"] == ("sum" if op == "reduce" else "none") for r in rows), f"{op}: redop column")

# all_gather and alltoall, in place included.
for op in ("all_gather", "alltoall"):
    p, _ = bench(3, "--op", op, "-b", "3K", "-e", "12K", "-f", "4", "-d", "int64", "-n", "2", "-w", "1")
    check_rows(op, p, op.replace("_", ""), 3, total_sized=True)

# sendrecv: to the next rank, from the previous; no in-place run.
p, _ = bench(3, "--op", "sendrecv", "-b", "1K", "-e", "16K", "-f", "4", "-n", "2", "-w", "1")
check_rows("sendrecv", p, "sendrecv", 3, in_place=False)

# -c 0: nothing checked.
p, _ = bench(2, "-b", "1K", "-e", "1K", "-c", "0", "-n", "1", "-w", "0")
check(p["rows"] and p["rows"][0]["out"]["wrong"] is None, "-c 0: #wrong is N/A")

# A barrier moves no data: no bandwidth anywhere.
p, text = bench(2, "--op", "barrier", "-n", "3")
check(len(p["rows"]) == 1 and p["rows"][0]["out"]["algbw"] is None and p["rows"][0]["out"]["busbw"] is None,
      "barrier: a bandwidth was printed")
check(p["avg_busbw"] is None, "barrier: an average bus bandwidth was printed")

# NCCL_TESTS_MIN_BW: below 0.9 of it fails.
p, _ = bench(2, "-b", "64K", "-e", "64K", "-n", "1", "-w", "0", env={"NCCL_TESTS_MIN_BW": "100000"}, expect_rc=1)
check(p.get("bw_status") == "FAILED", "NCCL_TESTS_MIN_BW: no FAILED")

# --json: what bench/ reads (bench/busbw.py: the out-of-place run's fields at the top), and the
# in-place run beside them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import busbw  # noqa: E402
res = subprocess.run([WEFT, "launch", "--nproc-per-node", "2", "--no-prefix", "--", "weft", "comm-bench", "-b", "1K", "-e",
                      "4K", "--json"], capture_output=True, text=True, timeout=300)
by_size = busbw.rows(res.stdout)
check(sorted(by_size) == [1024, 2048, 4096] and all(v > 0 for v in by_size.values()), f"--json as bench/ reads it: {by_size}")
check(all('"in_place":{"time_us"' in line for line in res.stdout.splitlines()), "--json: no in-place run")

# A requested size that is not a whole number of elements per rank is rounded down (20 B of
# half on 3 ranks: 3 per rank, 18 B): the row's size and both its bandwidths are of what moved,
# 11% below what was asked (--json's time and bandwidths carry enough digits to tell: the
# bandwidths six significant digits, the time 0.01 us).
res = subprocess.run([WEFT, "launch", "--nproc-per-node", "3", "--no-prefix", "--", "weft", "comm-bench", "--op",
                      "scatter", "-b", "20", "-e", "20", "-d", "half", "-n", "3", "-w", "1", "--json"],
                     capture_output=True, text=True, timeout=300)
rounded = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
check(len(rounded) == 1 and rounded[0]["bytes"] == 18 and rounded[0]["count"] == 3, f"20 B of half on 3 ranks: {rounded}")
runs = rounded[:1] + ([rounded[0]["in_place"]] if rounded and rounded[0]["in_place"] else [])
for run in runs:
    check(abs(run["algbw_gbps"] * run["time_us"] * 1e3 / 18 - 1) < 0.03,
          f"20 B rounded to 18: algbw {run['algbw_gbps']} GB/s over {run['time_us']} us is not of 18 B")

if failures:
    sys.exit(f"{len(failures)} failures")
print("comm-bench's output reads as nccl-tests' output, and its numbers add up")
