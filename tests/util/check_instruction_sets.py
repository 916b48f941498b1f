#!/usr/bin/python3
"""usage: check_instruction_sets.py PROGRAM

The portable build, read from its machine code (objdump): outside weft's dispatched loops
(util/dispatch.h: weft::detail::run_avx2 and the F16C conversions of util/half_float.h), the
serving's panel kernels (serve/int8_panels.cpp and serve/weight_panels.cpp: rows_256 and
rows_512, intrinsics run only on a processor with the instructions) and the libraries' own dispatched code (libxsmm's *_avx2
functions, linked statically), no instruction has a VEX or EVEX prefix (AVX, AVX2, FMA, F16C,
AVX-512: what x86-64-v2 lacks), and no AVX-512 (EVEX) instruction outside rows_512. (The panel
kernels are written with intrinsics, not left to the vectorizer whose constant vectors GCC 12
miscompiles; the portable build gives every machine the same code, and
Quantize.VnniPanelsGiveTheExactIntegerProduct and
WeightPanels.EveryOutputIsOneFusedMultiplyAddChainOnEveryPath check their results bit for bit.) Prints what it counted; exits 1 naming the first
functions that break the rule."""
import collections
import re
import subprocess
import sys

program = sys.argv[1]
dump = subprocess.run(["objdump", "-d", "-C", program],
                      check=True, capture_output=True, text=True).stdout
function = re.compile(r"^[0-9a-f]+ <(.*)>:$")
instruction = re.compile(r"^\s*[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t(\S.*)$")  # (continuation lines have no text)
legacy = {"66", "67", "f0", "f2", "f3", "2e", "3e", "26", "36", "64", "65"}
allowed = re.compile(r"weft::detail::run_avx2<|_ZN4weft6detail8run_avx2|_f16c\(|^internal_\w+_avx2$"  # (objdump leaves the longest names mangled)
                     r"|^void weft::serve::\(anonymous namespace\)::rows_(?:256|512)<")
evex_allowed = re.compile(r"^void weft::serve::\(anonymous namespace\)::rows_512<")

vex, evex = collections.Counter(), collections.Counter()
name = "?"
for line in dump.splitlines():
    if line.endswith(">:"):
        m = function.match(line)
        if m:
            name = m.group(1)
        continue
    fields = line.split("\t", 3)
    if len(fields) < 3 or not any(b in fields[1] for b in ("c4", "c5", "62")):  # (most lines, at once)
        continue
    m = instruction.match(line)
    if not m:
        continue
    code = m.group(1).split()
    i = 0
    while i < len(code) and code[i] in legacy:
        i += 1
    if i < len(code) and code[i] in ("c4", "c5"):  # (LES and LDS do not exist in 64-bit mode)
        vex[name] += 1
    elif i < len(code) and code[i] == "62":  # (BOUND does not either)
        evex[name] += 1

dispatched = [f for f in vex if allowed.search(f)]
outside = [f for f in vex if not allowed.search(f)]
print(f"{program}: {sum(vex.values())} VEX instructions in {len(vex)} functions, {len(dispatched)} of them dispatched "
      f"({sum(vex[f] for f in dispatched)} instructions); {sum(evex.values())} EVEX (AVX-512) instructions")
bad = False
if outside:
    print("VEX instructions outside the dispatched functions:", "; ".join(f[:120] for f in outside[:10]))
    bad = True
evex_outside = [f for f in evex if not evex_allowed.search(f)]
if evex_outside:
    print("AVX-512 instructions in:", "; ".join(f[:120] for f in evex_outside[:10]))
    bad = True
if not dispatched:
    print("no dispatched functions found (is this weft?)")
    bad = True
sys.exit(1 if bad else 0)
