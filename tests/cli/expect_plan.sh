#!/usr/bin/env bash
# weft plan, second edition, as a user runs it: a preset with a dimension changed is named as
# changed; the JSON carries the dimensions, every parameter count (adding up to the total),
# the links, the global batch and the rate with MFU and HFU; counts like --gpus take 1e3;
# days, iterations and iteration time agree; a workload asked for without a batch fails
# before anything is printed; flag and value errors exit 2 alike; --inference sizes serving.
# usage: expect_plan.sh WEFT
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
weft=$1
new_work_dir

"$weft" plan --layers 2 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["model"] == "gpt3-175b modified (--layers 2)", d["model"]
assert d["dimensions"]["layers"] == 2, d["dimensions"]
print("a changed preset is named as changed:", d["model"])'

"$weft" plan --gpus 1e3 --tp 8 --pp 5 --global-batch 1e3 --tokens 300e9 --tflops 150 --recompute --json > "$work/plan.json"
python3 - "$work/plan.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["parameter_counts"]
assert c["embedding"] + c["blocks"] + c["final_norm"] + c["lm_head"] == c["total"], c
assert d["layout"]["gpus"] == 1000 and d["layout"]["global_batch"] == 1000, d["layout"]
for key in ("nvlink_bytes_per_second", "rail_bytes_per_second", "gpus_per_node"): assert key in d["links"], d["links"]
r, it, t = d["rate"], d["iteration"], d["training"]
assert r["basis"] == "end-to-end" and abs(r["achieved_tflops"] - 150) < 1e-6, r
assert abs(r["hfu"] - 150 / 312) < 1e-3 and r["mfu"] < r["hfu"], r  # recomputation: hardware FLOPs exceed model FLOPs
assert abs(t["iterations"] * it["seconds"] - t["seconds"]) < 1e-6 * t["seconds"], (t, it)
assert abs(t["iterations"] - 300e9 / (1000 * 2048)) < 1e-6, t
assert abs(t["gpu_hours"] - t["seconds"] * 1000 / 3600) < 1e-6 * t["gpu_hours"], t
print(f"--gpus 1e3: {d['layout']['gpus']} GPUs; {t['iterations']:.0f} iterations x {it['seconds']:.2f} s = {t['days']:.1f} days, MFU {r['mfu']:.3f}, HFU {r['hfu']:.3f}")
PY

# A workload without a batch: the error before any of the plan is printed.
out=$("$weft" plan --emit-workload "$work/w" 2>/dev/null) && fail "--emit-workload without --global-batch"
[ -z "$out" ] || fail "--emit-workload without --global-batch printed the plan first: $out"
echo "--emit-workload without --global-batch: refused before printing"

# A folder with an earlier plan's traces of more ranks: refused before printing, its traces
# untouched; the same number of ranks replaces them.
"$weft" plan --model gpt2-124m --gpus 8 --dp 8 --global-batch 8 --emit-workload "$work/w" >/dev/null
sum=$(cat "$work"/w/rank-*.jsonl | md5sum)
set +e
out=$("$weft" plan --model gpt2-124m --gpus 4 --dp 4 --global-batch 8 --emit-workload "$work/w" 2>"$work/err")
code=$?
set -e
[ "$code" -eq 2 ] && [ -z "$out" ] || fail "a folder with 8 ranks' traces, a plan of 4: exit $code, printed: $out"
grep -qx "error: --emit-workload: $work/w already holds 4 trace files (rank-4.jsonl to rank-7.jsonl) of another workload, past this plan's 4 ranks; the replay would mix the two: remove them or choose another folder" "$work/err" \
  || fail "the refusal: $(cat "$work/err")"
[ "$(cat "$work"/w/rank-*.jsonl | md5sum)" = "$sum" ] || fail "the refused plan changed the traces"
"$weft" plan --model gpt2-124m --gpus 8 --tp 2 --dp 4 --global-batch 8 --emit-workload "$work/w" >/dev/null
echo "--emit-workload into a folder of more ranks' traces: refused before printing, traces untouched"

# Exit codes: the flag parser's and the planner's checks both say "bad usage" (2).
for args in "--gpus 0" "--zero 4" "--tp 7 --gpus 7" "--mfu 0.5 --tflops 100"; do
  set +e
  "$weft" plan $args >/dev/null 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "weft plan $args: exit $rc, expected 2"
done
echo "flag and value errors exit 2"

"$weft" plan --model llama3-70b --inference --gpu h100-80gb --tp 4 --batch 32 --context 8192 --json > "$work/inference.json"
python3 - "$work/inference.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["memory_per_gpu"]
# 2 x 80 layers x 8 kv heads / 4 GPUs x 128 x 2 bytes per token; 32 x 8192 tokens.
assert m["kv_per_token"] == 2 * 80 * 2 * 128 * 2, m
assert m["kv_cache"] == m["kv_per_token"] * 32 * 8192, m
assert abs(m["weights"] - 70.55e9 * 2 / 4) < 0.01e9, m
assert d["decode"]["bound"] == "memory" and m["fits"], d
assert d["max_batch"] == int((80e9 - m["weights"]) // (m["kv_per_token"] * 8192)), d
print(f"--inference: {m['total'] / 1e9:.1f} GB per GPU, up to {d['max_batch']} sequences, {d['decode']['tokens_per_second']:.0f} tokens/s")
PY

# Interconnect presets set the rails (rate and latency); --rail-gbps still overrides the
# rate; an unknown network is one line and exit 2. NVMe offload names where the state went.
"$weft" plan --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --global-batch 1536 --network ndr-ib --json > "$work/ndr.json"
"$weft" plan --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --global-batch 1536 --network roce-400g --rail-gbps 40 --json > "$work/roce.json"
"$weft" plan --model gpt3-175b --gpus 64 --tp 8 --pp 8 --global-batch 64 --zero 1 --recompute --offload optimizer --offload-to nvme --nvme-gbps 4 --json > "$work/nvme.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ndr, roce, nvme = (json.load(open(f"{w}/{n}.json")) for n in ("ndr", "roce", "nvme"))
assert ndr["links"]["rail_bytes_per_second"] == 50e9 and ndr["links"]["rail_latency_s"] == 5e-6, ndr["links"]
assert roce["links"]["rail_bytes_per_second"] == 40e9 and roce["links"]["rail_latency_s"] == 8e-6, roce["links"]
m = nvme["memory_per_gpu"]
assert m["nvme"] > 0 and m["host"] == 0, m
assert nvme["iteration"]["host"]["link"] == "nvme", nvme["iteration"]["host"]
print(f"--network ndr-ib: rails at 50 GB/s; --offload-to nvme: {m['nvme'] / 1e9:.1f} GB per GPU on NVMe, "
      f"{nvme['iteration']['host']['seconds']:.1f} s of transfers per iteration")
PY
err=$("$weft" plan --network opa 2>&1 >/dev/null) && fail "an unknown network was accepted"
case "$err" in *"unknown network 'opa'"*) ;; *) fail "unknown network: $err" ;; esac
echo "interconnect presets and NVMe offload"
