#!/usr/bin/env python3
"""usage: browser.py WEFT

The report pages in a real browser (headless Chromium), as a user opens them: weft writes a
training report (two runs overlaid), a pipeline run's report with its timeline, the PFC
cascade simulation of seed 002 chapter 11 (from `weft sim --report` and from `weft report
FOLDER`), a plan and a sweep. Each page is opened, in one Chromium driven over the DevTools
protocol, with a probe script added in front of the page's own: the test fails on any console
error or uncaught exception, on any chart that was not drawn (its canvas holds no coloured
pixel, its SVG no link), on any plotted series that differs from the files the run wrote
(metrics.jsonl, queues.csv, pfc.csv, flows.csv, counters.csv, the traces), and on charts
that mislead (an axis that hides a point or a constant, labels over labels, a bar stack
other than its table's total).
"""
import csv
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time

WEFT = os.path.abspath(sys.argv[1])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def run(*args, cwd):
    r = subprocess.run([WEFT, *args], cwd=cwd, capture_output=True, text=True, errors="replace", timeout=600)
    if r.returncode != 0:
        sys.exit(f"weft {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


PROBE = r"""<script>
window.__probe = {errors: []};
(function () {
  const original = console.error;
  console.error = function () { window.__probe.errors.push(Array.from(arguments).join(' ')); original.apply(console, arguments); };
  window.addEventListener('error', (e) => window.__probe.errors.push('uncaught: ' + e.message));
  function coloured(canvas) {
    const ctx = canvas.getContext('2d');
    const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 200 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) ++n;
    }
    return n;
  }
  window.addEventListener('load', () => setTimeout(() => {
    const out = {errors: window.__probe.errors, charts: []};
    out.doc = JSON.parse(document.getElementById('weft-data').textContent);
    for (const c of window.weftCharts || []) {
      const e = {id: c.id, type: c.type};
      const canvas = c.chart && c.chart.canvas;
      if (canvas) e.coloured = coloured(canvas);
      if (c.type === 'topology') {
        e.lines = c.chart.svg.querySelectorAll('line').length;
        e.circles = c.chart.svg.querySelectorAll('circle').length;
      }
      if (c.chart && c.chart.scales && c.chart.scales.x && c.chart.scales.y && c.type !== 'bar') {
        e.scales = {x: [c.chart.scales.x.min, c.chart.scales.x.max], y: [c.chart.scales.y.min, c.chart.scales.y.max]};
      }
      if (c.chart && c.chart.$weftMarks) e.marks = c.chart.$weftMarks;
      if (c.chart && c.chart.$weftOffScale) e.off_scale = c.chart.$weftOffScale;
      if (c.chart && c.chart.data && c.chart.data.datasets) {
        e.datasets = c.chart.data.datasets.map((d, i) => ({label: d.label, data: d.data, color: d.borderColor || d.backgroundColor,
                                                          drawn: c.chart.getDatasetMeta(i).data.length}));
      }
      out.charts.push(e);
    }
    const pre = document.createElement('pre');
    pre.id = 'weft-probe';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 50));
})();
</script>"""


class Browser:
    """One headless Chromium for every page, driven over the DevTools protocol on a pipe
    (--remote-debugging-pipe: commands on its fd 3, replies and events on its fd 4, each a
    JSON message ended by a NUL byte). Starting Chromium costs about 2 s of CPU; a page in
    a running one, a fraction of that."""

    def __init__(self, work):
        to_chrome, self.commands = os.pipe()
        self.replies, from_chrome = os.pipe()

        def on_fds_3_and_4():  # (copies first: the pipes may be fds 3 and 4 already, and close on exec)
            a, b = os.dup(to_chrome), os.dup(from_chrome)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log = open(os.path.join(work, "chromium.log"), "w")
        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", "--user-data-dir=" + os.path.join(work, "chromium"), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, preexec_fn=on_fds_3_and_4, close_fds=False)
        os.close(to_chrome)
        os.close(from_chrome)
        self.next_id = 0
        self.buffer = b""
        self.events = []

    def _read(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                sys.exit("Chromium did not answer within 120 s")
            ready, _, _ = select.select([self.replies], [], [], 1.0)
            if ready:
                chunk = os.read(self.replies, 1 << 20)
                if not chunk:
                    sys.exit(f"Chromium ended (exit {self.process.poll()})")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 120
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def probe(self, url):
        """Opens url in a new tab of 1300 x 1800; returns the probe's report and the page's
        uncaught exceptions and console errors the protocol saw."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.events = []
        self.call("Emulation.setDeviceMetricsOverride", {"width": 1300, "height": 1800, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        self.call("Runtime.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        deadline = time.monotonic() + 60
        text = None
        while text is None and time.monotonic() < deadline:
            got = self.call("Runtime.evaluate", {"expression": "(document.getElementById('weft-probe') || {}).textContent",
                                                 "returnByValue": True}, session=session)
            text = got.get("result", {}).get("value")
            if text is None:
                time.sleep(0.05)
        errors = [(e["params"]["exceptionDetails"].get("exception") or {}).get("description")
                  or e["params"]["exceptionDetails"].get("text", "") for e in self.events
                  if e.get("method") == "Runtime.exceptionThrown" and e.get("sessionId") == session]
        errors += [" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"])
                   for e in self.events if e.get("method") == "Runtime.consoleAPICalled"
                   and e.get("sessionId") == session and e["params"]["type"] == "error"]
        self.call("Target.closeTarget", {"targetId": target})
        return text, errors

    def close(self):
        try:
            self.call("Browser.close")
        except SystemExit:
            pass
        self.process.wait(timeout=30)
        self.log.close()


browser = None


def open_page(path):
    """Opens the page with the probe in headless Chromium; returns the probe's findings."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    check("http://" not in page.split('<script id="weft-data"')[0] and "<link" not in page,
          f"{path}: the page refers to something outside itself")
    probed = path + ".probe.html"
    with open(probed, "w", encoding="utf-8") as f:
        f.write(page.replace("<head>", "<head>\n" + PROBE, 1))
    text, console_errors = browser.probe("file://" + probed)
    if text is None:
        sys.exit(f"{path}: the probe did not report within 60 s")
    found = json.loads(text)
    check(console_errors == [], f"{path}: console errors or uncaught exceptions {console_errors}")
    check(found["errors"] == [], f"{path}: console errors {found['errors']}")
    wanted = [c["id"] for s in found["doc"]["sections"] for c in s.get("charts", [])]
    drawn = [c["id"] for c in found["charts"]]
    check(wanted == drawn, f"{path}: charts {wanted} but drawn {drawn}")
    for c in found["charts"]:
        if c["type"] == "topology":
            check(c["lines"] > 0 and c["circles"] > 0, f"{path}: topology drawn without links or nodes")
        else:
            check(c.get("coloured", 0) > 20, f"{path}: chart {c['id']} has no coloured pixels ({c.get('coloured')})")
        # A chart of one constant value on an axis it can be read from: at most 4 times the
        # value wide (Chart.js's own range, v - 1 to v + 1, drew a learning rate of 0.01 as 0).
        ys = {p["y"] for d in c.get("datasets", []) for p in d["data"] if isinstance(p, dict) and p.get("y") is not None}
        if "scales" in c and len(ys) == 1 and next(iter(ys)) != 0:
            v = next(iter(ys))
            check(c["scales"]["y"][1] - c["scales"]["y"][0] <= 4 * abs(v),
                  f"{path}: chart {c['id']}: the constant {v} on an axis {c['scales']['y']}")
        # Positive values within 1% of each other on an axis from 0 (a range of a few
        # thousandths had drawn flows of the same rate far apart).
        if "scales" in c and ys and min(ys) > 0 and max(ys) - min(ys) <= 0.01 * max(ys):
            check(c["scales"]["y"][0] == 0, f"{path}: chart {c['id']}: values within 1% of each other on an axis "
                                            f"{c['scales']['y']}")
        for d in c.get("datasets", []):
            if d["data"]:
                check(d["drawn"] > 0, f"{path}: chart {c['id']} series {d['label']} has data but no drawn elements")
            # Every plotted point inside the axes' ranges (a point outside is not drawn), or
            # above an axis that ends below it and labelled there with its value.
            if "scales" in c:
                (x0, x1), (y0, y1) = c["scales"]["x"], c["scales"]["y"]
                labelled = {(q["x"], q["y"]) for q in c.get("off_scale", [])}
                outside = [p for p in d["data"] if isinstance(p, dict) and p.get("x") is not None and p.get("y") is not None
                           and not (x0 <= p["x"] <= x1 and y0 <= p["y"] <= y1)
                           and not (x0 <= p["x"] <= x1 and p["y"] > y1 and (p["x"], p["y"]) in labelled)]
                check(not outside, f"{path}: chart {c['id']} series {d['label']}: {len(outside)} points outside the axes "
                                   f"x {x0}..{x1}, y {y0}..{y1}, such as {outside[:2]}")
        # Labels beside points overlap no other label.
        marks = c.get("marks", [])
        overlapping = [(a["mark"], b["mark"]) for i, a in enumerate(marks) for b in marks[i + 1:]
                       if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]]
        check(not overlapping, f"{path}: chart {c['id']}: labels overlap: {overlapping[:3]}")
    print(f"{os.path.basename(path)}: {len(drawn)} charts drawn, no console errors")
    return found


def chart(found, chart_id):
    for c in found["charts"]:
        if c["id"] == chart_id:
            return c
    sys.exit(f"no chart {chart_id}")


def doc_chart(found, chart_id):
    for s in found["doc"]["sections"]:
        for c in s.get("charts", []):
            if c["id"] == chart_id:
                return c
    sys.exit(f"no chart {chart_id} in the document")


def series(c, label):
    for d in c["datasets"]:
        if d["label"] == label:
            return [(p["x"], p["y"]) for p in d["data"]]
    sys.exit(f"chart {c['id']}: no series {label!r} (has {[d['label'] for d in c['datasets']]})")


def records(path):
    steps = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "step":
                steps[r["step"]] = r
    return [steps[k] for k in sorted(steps)]


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def same_points(got, want):
    return len(got) == len(want) and all(close(g[0], w[0]) and close(g[1], w[1]) for g, w in zip(got, want))


def training(work):
    common = ["train", "--model", "mlp", "--epochs", "1", "--limit-train", "3200", "--limit-test", "500",
              "--eval-every", "10", "--quiet"]
    run(*common, "--metrics", "sgd.metrics.jsonl", cwd=work)
    run(*common, "--lr", "0.05", "--lr-schedule", "cosine", "--metrics", "cosine.metrics.jsonl", cwd=work)
    run("report", "sgd.metrics.jsonl", "cosine.metrics.jsonl", "-o", "train.html", cwd=work)
    found = open_page(os.path.join(work, "train.html"))
    for name in ("sgd", "cosine"):
        steps = records(os.path.join(work, name + ".metrics.jsonl"))
        check(same_points(series(chart(found, "loss"), name), [(r["step"], r["loss"]) for r in steps]),
              f"train.html: the loss curve of {name} differs from its metrics file")
        check(same_points(series(chart(found, "lr"), name), [(r["step"], r["lr"]) for r in steps]),
              f"train.html: the learning-rate curve of {name} differs from its metrics file")
        evals = [(r["step"], 100 * r["test_accuracy"]) for r in steps if "test_accuracy" in r]
        check(len(evals) >= 5 and same_points(series(chart(found, "validation"), name + ": test accuracy"), evals),
              f"train.html: the accuracy points of {name} differ from its metrics file")
        check(same_points(series(chart(found, "throughput"), name + " rank 0"),
                          [(r["step"], r["samples_per_second"]) for r in steps]),
              f"train.html: the throughput of {name} differs from its metrics file")
    # Each run keeps one colour on every chart, and the two runs differ.
    colours = {}
    for c in found["charts"]:
        for d in c.get("datasets", []):
            run_name = d["label"].split(":")[0].split(" ")[0]
            colours.setdefault(run_name, set()).add(d["color"])
    check(all(len(v) == 1 for v in colours.values()) and colours["sgd"] != colours["cosine"],
          f"train.html: the runs' colours change between charts: {colours}")

    # A pipeline run: both ranks' throughput, and its timeline as lanes.
    r = subprocess.run([WEFT, "launch", "--nproc-per-node", "2", "--", "weft", "train", "--model", "gpt", "--pp", "2",
                        "--micro-batches", "4", "--max-steps", "6", "--layers", "2", "--d-model", "32", "--context",
                        "16", "--eval-batches", "1", "--quiet", "--timeline", "tl.json", "--metrics",
                        "pp.metrics.jsonl", "--report", "pp.html"], cwd=work, capture_output=True, text=True,
                       errors="replace", timeout=600)
    check(r.returncode == 0, f"the pipeline run failed: {r.stderr[-1000:]}")
    found = open_page(os.path.join(work, "pp.html"))
    rates = chart(found, "throughput")
    check([d["label"] for d in rates["datasets"]] == ["rank 0", "rank 1"], "pp.html: not one throughput series per rank")
    check(same_points(series(rates, "rank 1"), [(r["step"], r["tokens_per_second"])
                                                for r in records(os.path.join(work, "pp.metrics-rank1.jsonl"))]),
          "pp.html: rank 1's throughput differs from its metrics file")
    lanes = doc_chart(found, "timeline")
    events = 0
    for rank in (0, 1):
        with open(os.path.join(work, f"tl-rank{rank}.json")) as f:
            events += sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
    check(len(lanes["lanes"]) == 4, f"pp.html: {len(lanes['lanes'])} lanes, not a compute and a comm lane per rank")
    check(len(lanes["spans"]) == events, f"pp.html: {len(lanes['spans'])} spans drawn of the traces' {events}")
    kinds = {k["name"] for k in lanes["kinds"]}
    check({"forward", "backward", "optimizer"} <= kinds and any(k.startswith("send") for k in kinds),
          f"pp.html: lanes lack forward, backward, optimizer or pipeline sends: {kinds}")

    # An image model's run beside a language model's: accuracy (%) and validation loss on
    # charts of their own, and samples/s and tokens/s too.
    run("report", "sgd.metrics.jsonl", "pp.metrics.jsonl", "-o", "mixed.html", cwd=work)
    found = open_page(os.path.join(work, "mixed.html"))
    check(all(d["label"].endswith("test accuracy") for d in chart(found, "validation")["datasets"]) and
          all(d["label"].endswith("validation loss") for d in chart(found, "validation_loss")["datasets"]),
          "mixed.html: accuracy and validation loss share a chart")
    for unit, run_name in (("samples", "sgd"), ("tokens", "pp")):
        rates = doc_chart(found, "throughput_" + unit)
        check(rates["y"] == unit + "/s" and all(s["name"].startswith(run_name + " ") for s in rates["series"]),
              f"mixed.html: the {unit}/s chart holds {[s['name'] for s in rates['series']]}")

    # A first step 86 times the others': the step-time axis ends near the steady steps, and the
    # first step is labelled at the top with its value (it had flattened every other step).
    with open(os.path.join(work, "spike.metrics.jsonl"), "w") as f:
        f.write(json.dumps({"kind": "run", "model": "mlp", "unit": "samples"}) + "\n")
        for step in range(1, 51):
            f.write(json.dumps({"kind": "step", "step": step, "loss": 1.0, "seconds": 0.43 if step == 1 else 0.005,
                                "samples_per_second": 1000, "compute_seconds": 0.43 if step == 1 else 0.005}) + "\n")
    run("report", "spike.metrics.jsonl", "-o", "spike.html", cwd=work)
    found = open_page(os.path.join(work, "spike.html"))
    times = chart(found, "step_time")
    check(times["scales"]["y"][1] < 10 and {(p["x"], p["y"]) for p in times.get("off_scale", [])} == {(1, 430.0)},
          f"spike.html: step time axis {times['scales']['y']}, labelled above it: {times.get('off_scale')}")


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def simulation(work):
    out = run("sim", "--topology", os.path.join(REPO, "examples/topologies/pfc-cascade.yaml"), "--workload",
              "incast:4:4MB@4,0-3", "--cc", "none", "--out", "cascade", "--report", "cascade.html", "--quiet", cwd=work)
    check("report: cascade.html" in out, "weft sim --report did not say where the page is")
    run("report", "cascade", "-o", "cascade-again.html", cwd=work)
    for page in ("cascade.html", "cascade-again.html"):
        found = open_page(os.path.join(work, page))
        d = os.path.join(work, "cascade")
        # Queue occupancy: every non-zero point is a row of queues.csv, and every row of a drawn queue is drawn.
        rows = read_csv(os.path.join(d, "queues.csv"))
        by_queue = {}
        for r in rows:
            by_queue.setdefault(f"{r['port']} q{r['queue']}", []).append((float(r["time_us"]), int(r["bytes"]) / 1e3))
        queues = chart(found, "queues")
        busiest = max(by_queue, key=lambda k: max(b for _, b in by_queue[k]))
        check(queues["datasets"][0]["label"] == busiest, f"{page}: the first queue drawn is not the busiest ({busiest})")
        for dset in queues["datasets"]:
            got = [(p["x"], p["y"]) for p in dset["data"] if p["y"] != 0]
            check(same_points(got, by_queue[dset["label"]]), f"{page}: queue {dset['label']} differs from queues.csv")
        # PFC lanes: pause -> resume intervals of pfc.csv, ports in the order they first paused.
        lanes = doc_chart(found, "pfc")
        first, open_at, spans = {}, {}, {}
        for r in read_csv(os.path.join(d, "pfc.csv")):
            name = f"{r['from']} → {r['to']} q{r['queue']}"
            t = float(r["time_us"])
            first.setdefault(name, t)
            if r["frame"] == "pause" and name not in open_at:
                open_at[name] = t
            elif r["frame"] == "resume" and name in open_at:
                spans.setdefault(name, []).append((open_at.pop(name), t))
        order = sorted(first, key=lambda n: (first[n], n))
        check(lanes["lanes"] == order, f"{page}: PFC lanes {lanes['lanes']} not in first-pause order {order}")
        check(order[0].startswith("rail-c → spine-1") and order[1].startswith("spine-1 → rail-"),
              f"{page}: the cascade does not start at rail C and spread to spine 1's ports: {order[:3]}")
        drawn = {}
        for lane, _, a, b in lanes["spans"]:
            drawn.setdefault(lanes["lanes"][lane], []).append((a, b))
        for name in order:
            want = spans.get(name, [])
            got = drawn.get(name, [])[: len(want)]
            check(same_points(got, want), f"{page}: pauses of {name} differ from pfc.csv")
        # The completion-time distribution: flows.csv's completion times, in order.
        fct = sorted(float(r["fct_us"]) for r in read_csv(os.path.join(d, "flows.csv")) if r["fct_us"])
        cdf = series(chart(found, "fct_cdf"), "flows")
        check([x for x, _ in cdf] == sorted(set(fct)) and close(cdf[-1][1], 1.0), f"{page}: the FCT CDF differs from flows.csv")
        # Congestion counters: per interval, summing to the last sample's totals.
        counters = read_csv(os.path.join(d, "counters.csv"))
        pauses = series(chart(found, "congestion"), "PFC pause frames")
        check(close(sum(y for _, y in pauses), int(counters[-1]["pfc_pauses"]) - int(counters[0]["pfc_pauses"])),
              f"{page}: the pause counts differ from counters.csv")
        topo = chart(found, "topology")
        check(topo["circles"] == 9 and topo["lines"] == 8, f"{page}: topology drawn with {topo['circles']} nodes, "
                                                           f"{topo['lines']} links (want 9 and 8)")


def plans(work):
    args = ["plan", "--model", "gpt3-175b", "--gpus", "1024", "--global-batch", "1536"]
    run(*args, "--tp", "8", "--pp", "16", "--report", "plan.html", cwd=work)
    found = open_page(os.path.join(work, "plan.html"))
    bars = chart(found, "memory")
    plan = json.loads(run(*args, "--tp", "8", "--pp", "16", "--json", cwd=work))
    for key, label in (("weights", "weights"), ("optimizer", "optimizer states"), ("activations", "activations")):
        got = [d["data"] for d in bars["datasets"] if d["label"] == label]
        check(got and close(got[0][0], plan["memory_per_gpu"][key] / 1e9), f"plan.html: {label} differ from the plan")
    # The bar's stack is the table's total (it had left 2.1 GB of buffers and overhead out).
    stack = sum(d["data"][0] for d in bars["datasets"])
    table = {row[0]: row[1] for s in found["doc"]["sections"] if "table" in s for row in s["table"]["rows"]}
    said = float(re.match(r"([0-9.]+) GB", table["memory per GPU"]).group(1))
    check(abs(stack - said) <= 0.05 and close(stack, plan["memory_per_gpu"]["total"] / 1e9),
          f"plan.html: the memory bar stacks to {stack:.2f} GB, the table says {said} GB")
    with open(os.path.join(work, "sweep.json"), "w") as f:
        f.write(run(*args, "--sweep", "--json", cwd=work))
    run("report", "sweep.json", "-o", "sweep.html", cwd=work)
    found = open_page(os.path.join(work, "sweep.html"))
    with open(os.path.join(work, "sweep.json")) as f:
        sweep = json.load(f)
    points = [p for d in chart(found, "sweep")["datasets"] for p in d["data"]]
    check(len(points) == len(sweep["layouts"]), f"sweep.html: {len(points)} points for {len(sweep['layouts'])} layouts")
    marked = [p["mark"] for p in points if "mark" in p]
    check(len(marked) == min(10, len(sweep["layouts"])) and any(m.startswith("1. ") for m in marked),
          f"sweep.html: the fastest layouts are not labelled: {marked}")
    placed = sorted(m["mark"] for m in chart(found, "sweep").get("marks", []))
    check(placed == sorted(marked), f"sweep.html: labels drawn {placed}, points marked {sorted(marked)}")
    bars = chart(found, "memory")
    for i, layout in enumerate(sweep["layouts"][:len(bars["datasets"][0]["data"])]):
        stack = sum(d["data"][i] for d in bars["datasets"])
        check(close(stack, layout["memory_per_gpu"]["total"] / 1e9),
              f"sweep.html: layout {i + 1}'s memory bar stacks to {stack} GB of its {layout['memory_per_gpu']['total'] / 1e9}")


def large(work):
    """A 1,000-step run and a 1,024-GPU simulation: pages under 5 MB, series decimated to points of the files."""
    run("train", "--model", "mlp", "--epochs", "2", "--limit-train", "32000", "--batch", "64", "--limit-test", "500",
        "--eval-every", "100", "--quiet", "--metrics", "long.metrics.jsonl", cwd=work)
    steps = records(os.path.join(work, "long.metrics.jsonl"))
    check(len(steps) == 1000, f"the long run has {len(steps)} steps")
    run("report", "long.metrics.jsonl", "--max-points", "200", "-o", "long.html", cwd=work)
    found = open_page(os.path.join(work, "long.html"))
    loss = series(chart(found, "loss"), "training loss")
    file_points = {(r["step"], r["loss"]) for r in steps}
    check(len(loss) <= 200 and all(p in file_points for p in loss), "long.html: decimated loss points are not the file's")
    losses = [r["loss"] for r in steps]
    check(max(losses) in [y for _, y in loss] and min(losses) in [y for _, y in loss],
          "long.html: decimation lost the loss curve's highest or lowest point")
    out = run("sim", "--topology", os.path.join(REPO, "examples/topologies/a100-1024.yaml"), "--workload",
              "permutation:1MB", "--out", "big", "--report", "big.html", "--quiet", cwd=work)
    for page in ("long.html", "big.html"):
        size = os.path.getsize(os.path.join(work, page))
        check(size < 5e6, f"{page}: {size} bytes (over 5 MB)")
        print(f"{page}: {size / 1e3:.0f} KB")
    found = open_page(os.path.join(work, "big.html"))
    for c in found["charts"]:
        for d in c.get("datasets", []):
            check(len(d["data"]) <= 2000, f"big.html: {c['id']} series {d['label']} has {len(d['data'])} points")
    topo = chart(found, "topology")
    nodes = len(read_csv(os.path.join(work, "big", "nodes.csv")))
    check(topo["circles"] == nodes, f"big.html: {topo['circles']} nodes drawn of {nodes}")


def main():
    global browser
    parts = sys.argv[2:] or ["training", "simulation", "plans", "large"]
    with tempfile.TemporaryDirectory() as work:
        browser = Browser(work)
        try:
            for part in parts:
                globals()[part](work)
        finally:
            browser.close()
    if failures:
        print(f"{len(failures)} failures")
        sys.exit(1)
    print("ok")


main()
