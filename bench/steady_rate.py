#!/usr/bin/python3
"""usage: steady_rate.py METRICS.jsonl WARMUP

The steady-state rate of a weft train run from its metrics file: units (samples or tokens)
per second over the steps after the first WARMUP, the one-time set-up of the first steps
left out (as the PyTorch scripts' --warmup does on the other side)."""
import json
import sys

warmup = int(sys.argv[2])
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step" and r["step"] > warmup]
if not steps:
    sys.exit(f"error: {sys.argv[1]} has no step after the first {warmup}")
key = next(k for k in steps[0] if k.endswith("_per_second"))
units = sum(r[key] * r["seconds"] for r in steps)
print(f"{units / sum(r['seconds'] for r in steps):.1f}")
