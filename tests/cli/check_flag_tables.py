#!/usr/bin/env python3
"""weft train's, launch's, sim's, serve's, predict's, generate's, plan's, comm-bench's and serve-bench's flags come from tables: --help shows exactly a table's flags, a --config
YAML file takes the table's keys (and refuses others), the run's resolved configuration holds
only table keys and reads back, and the docs' option lists are the table's (scripts/docs-flags.py).
Usage: check_flag_tables.py WEFT REPO WORKDIR"""
import pathlib
import re
import shutil
import subprocess
import sys

weft, repo, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
work.mkdir(parents=True, exist_ok=True)
failures = []


def run(*args, ok=True):
    p = subprocess.run([weft, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: weft {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def help_flags(command):
    """The long names of a command's options, as --help lists them ("-r,--redirects": --redirects)."""
    names = []
    for line in run(command, "--help").stdout.splitlines():
        m = re.match(r"  ((?:-\w,)?--[a-z0-9_-]+(?:,--[a-z0-9_-]+)*)", line)
        if m:
            names.append(next(n for n in m.group(1).split(",") if n.startswith("--")))
    return [n for n in names if n != "--help"]


tables = {}
for command, least in (("train", 90), ("launch", 20), ("sim", 10), ("serve", 20), ("predict", 10), ("generate", 15), ("plan", 70), ("comm-bench", 19), ("serve-bench", 13)):
    table = re.findall(r"^\| `(--[a-z0-9-]+)`", run("flags", command).stdout, re.M)
    tables[command] = table
    if len(table) < least or len(set(table)) != len(table):
        failures.append(f"weft flags {command} lists {len(table)} flags ({len(set(table))} distinct)")
    helped = help_flags(command)
    if sorted(helped) != sorted(table):
        failures.append(f"weft {command}: --help and the table differ: only in --help {sorted(set(helped) - set(table))}, "
                        f"only in the table {sorted(set(table) - set(helped))}")
table = tables["train"]

# A YAML file's keys are the table's flags without their dashes; the run's resolved
# configuration holds only such keys and reads back as it was written.
ck = work / "ck"
for folder in (ck, work / "ck2"):  # (an earlier run of this test's checkpoints: a run starts afresh)
    shutil.rmtree(folder, ignore_errors=True)
config = work / "run.yaml"
config.write_text("model: mlp\nlr: 0.05\nbatch: 32\nlimit-train: 64\nlimit-test: 64\nmax-steps: 1\nquiet: true\n")
run("train", "--config", str(config), "--checkpoint-dir", str(ck), "--threads", "1")
written = (ck / "config.yaml").read_text()
keys = re.findall(r"^([a-z0-9-]+):", written, re.M)
strays = [k for k in keys if "--" + k not in table]
if strays or not {"model", "lr", "batch", "max-steps", "checkpoint-dir"} <= set(keys):
    failures.append(f"config.yaml keys {keys}: not in the table {strays}")
again = run("train", "--config", str(ck / "config.yaml"), "--checkpoint-dir", str(work / "ck2"))
if (work / "ck2" / "config.yaml").read_text() != written.replace(str(ck), str(work / "ck2")):
    failures.append("the resolved configuration does not read back as written")
bad = work / "bad.yaml"
bad.write_text("learning-rate: 0.1\n")
refused = run("train", "--config", str(bad), ok=False)
if refused.returncode == 0 or "'learning-rate' is not a flag of weft train" not in refused.stderr:
    failures.append(f"a key outside the table was taken: {refused.stderr.strip()}")

# Every WEFT_ variable the sources name is in the environment table (weft flags env).
declared = set(re.findall(r"^\| `(WEFT_[A-Z0-9_]+)`", run("flags", "env").stdout, re.M))
named = set()
for source in (repo / "src").rglob("*.[ch]*"):
    named |= set(re.findall(r'"(WEFT_[A-Z0-9_]+)"', source.read_text(errors="replace")))
if named - declared or len(declared) < 30:
    failures.append(f"environment variables the sources name but the table does not: {sorted(named - declared)}")

docs = subprocess.run([sys.executable, str(repo / "scripts/docs-flags.py"), weft, str(repo / "docs"), "--check"],
                      capture_output=True, text=True)
if docs.returncode != 0:
    failures.append(docs.stdout.strip() + docs.stderr.strip())

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print(", ".join(f"{c} {len(t)} flags" for c, t in tables.items()) + ": --help, the YAML keys and the docs' lists agree with the tables")
