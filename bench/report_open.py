#!/usr/bin/env python3
"""bench/report_open.py: how fast the largest report pages open in a browser.

Writes, with the built weft, the pages docs/reports.md promises open in under 2 s and stay
under 5 MB: a 1,000-step training run (with its evaluations) and a simulation of 1,024 GPUs
(a100-1024.yaml, a permutation of 4 MB per GPU, sampling every 10 us), plus the small
PFC-cascade page for scale. Each page is opened once untimed (warm-up), then REPEATS times
(default 5) in headless Chromium; a probe script added in front of the page's own records the time from navigation
start until every chart is drawn (the page's script has run and the load event has fired).
Prints each page's size, the median and range of that time, and the median wall time of the
whole browser process (start-up included), against the goal (there is no reference tool to
run beside it: the figure is compared with the 2 s and 5 MB of docs/reports.md). Nothing else
should run on the machine meanwhile.

  python3 bench/report_open.py [REPEATS]
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEFT = os.path.join(REPO, "build", "weft")
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
PROBE = """<script>window.addEventListener('load', () => {
  const pre = document.createElement('pre'); pre.id = 'probe';
  pre.textContent = JSON.stringify({ms: performance.now(), charts: (window.weftCharts || []).length});
  document.body.appendChild(pre); });</script>"""


def weft(*args, cwd):
    subprocess.run([WEFT, *args], cwd=cwd, check=True, capture_output=True)


def open_once(path):
    t0 = time.perf_counter()
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1800",
                        "--user-data-dir=" + os.path.join(os.path.dirname(path), "chromium"), "--dump-dom", "file://" + path], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    probe = json.loads(m.group(1).replace("&quot;", '"'))
    return probe["ms"] / 1e3, wall, probe["charts"]


def main():
    with tempfile.TemporaryDirectory() as work:
        weft("train", "--model", "mlp", "--epochs", "2", "--limit-train", "32000", "--batch", "64", "--eval-every",
             "50", "--quiet", "--metrics", "long.jsonl", cwd=work)
        weft("report", "long.jsonl", "-o", "run-1000-steps.html", cwd=work)
        weft("sim", "--topology", os.path.join(REPO, "examples/topologies/a100-1024.yaml"), "--workload",
             "permutation:4MB", "--quiet", "--out", "big", "--report", "sim-1024-gpus.html", cwd=work)
        weft("sim", "--topology", os.path.join(REPO, "examples/topologies/pfc-cascade.yaml"), "--workload",
             "incast:4:4MB@4,0-3", "--cc", "none", "--quiet", "--report", "sim-cascade.html", cwd=work)
        pages = ["run-1000-steps.html", "sim-1024-gpus.html", "sim-cascade.html"]
        probed = {}
        for p in pages:
            with open(os.path.join(work, p)) as f:
                html = f.read()
            probed[p] = os.path.join(work, "probe-" + p)
            with open(probed[p], "w") as f:
                f.write(html.replace("<head>", "<head>" + PROBE, 1))
        csv_bytes = sum(os.path.getsize(os.path.join(work, "big", f)) for f in os.listdir(os.path.join(work, "big")))
        print(f"report_open: {REPEATS} openings per page, interleaved; headless Chromium "
              f"{subprocess.run(['chromium', '--version'], capture_output=True, text=True).stdout.strip()}")
        print(f"(the 1,024-GPU simulation's CSV files: {csv_bytes / 1e6:.1f} MB)")
        for p in pages:  # warm-up: the first opening of each page (cold caches) is not timed
            open_once(probed[p])
        times = {p: [] for p in pages}
        walls = {p: [] for p in pages}
        charts = {}
        for _ in range(REPEATS):
            for p in pages:
                drawn, wall, charts[p] = open_once(probed[p])
                times[p].append(drawn)
                walls[p].append(wall)
        print("goal: drawn within 2 s, under 5 MB")
        print(f"{'page':24} {'size':>8} {'charts':>6} {'drawn after (median, min-max)':>32} {'browser wall (median)':>22}")
        for p in pages:
            size = os.path.getsize(os.path.join(work, p))
            t = times[p]
            print(f"{p:24} {size / 1e6:6.2f}MB {charts[p]:>6} {statistics.median(t):10.3f} s ({min(t):.3f}-{max(t):.3f})"
                  f" {statistics.median(walls[p]):18.2f} s")


main()
