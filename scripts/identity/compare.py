"""Compare two identity corpora (scripts/identity/run.sh): every file of BEFORE
against AFTER.

    python3 scripts/identity/compare.py BEFORE AFTER [OLD=NEW ...]

JSON: equal after dropping provenance (commit, host, time, versions), wall-clock fields
and the corpora's own directory names; OLD=NEW renames made on purpose (a JSON key, a
word in the text) are applied to BEFORE first.  PNG: bytes.  Markdown and text: equal
after dropping the provenance line, progress lines (when they print depends on the
wall clock) and wall-clock figures.  Zip (an RL policy): each member's bytes but sb3's
"data" (the training's start time and its episodes' wall times).  Prints a line per
file kind and every difference; exits 1 on any.
"""
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

before, after = Path(sys.argv[1]), Path(sys.argv[2])
RENAMES = dict(a.split("=", 1) for a in sys.argv[3:])   # old=new (JSON keys and text)
DIRS = re.compile("|".join(re.escape(str(d.resolve())) + "|" + re.escape(str(d))
                           for d in (before, after)))
# where and when a result was made, and how long it took: the rest must be equal
DROP = {"provenance", "elapsed_s", "wall_s", "train_s"}
TIMING = re.compile(r"\(\d+ s\)|\d+(\.\d+)? ?(s|ms) (wall|elapsed)|in \d+(\.\d+)? ?s\b|"
                    r"\d+(\.\d+)? s/episode|\b\d+:\d\d(:\d\d)?\b|ETA [^,\]]*|\d+\.\d+ ms")
PROGRESS = re.compile(r"runs at [0-9.]+ s simulated|ns-3 at [0-9.]+ s simulated|^\[#*\.*\]|"
                      r"^(fair|mltcp): \d+ s$|^\[\d+/\d+\] .*\(\d+ s\)$|episode \d+/")
PROV_LINE = re.compile(r"^git [0-9a-f]{7,}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")

def norm_json(x):
    if isinstance(x, dict):
        return {RENAMES.get(k, k): norm_json(v) for k, v in x.items() if k not in DROP}
    if isinstance(x, list):
        return [norm_json(v) for v in x]
    if isinstance(x, str):
        x = DIRS.sub("DIR", x)
        for a, b in RENAMES.items():
            x = x.replace(a, b)
        return x
    return x

def norm_text(t):
    t = DIRS.sub("DIR", t)
    for a, b in RENAMES.items():
        t = t.replace(a, b)
    out = []
    for line in t.splitlines():
        if PROV_LINE.search(line):
            continue
        if PROGRESS.search(line):        # progress lines: when they print depends on the wall clock
            continue
        out.append(TIMING.sub("T", line))
    return out


def compare_zip(f: Path, g: Path) -> bool:
    za, zb = zipfile.ZipFile(f), zipfile.ZipFile(g)
    ma = {n: hashlib.sha256(za.read(n)).hexdigest() for n in za.namelist() if n != "data"}
    mb = {n: hashlib.sha256(zb.read(n)).hexdigest() for n in zb.namelist() if n != "data"}
    if ma != mb:
        diffs.append(f"ZIP {f.relative_to(before)}: members differ: "
                     f"{[n for n in ma if ma.get(n) != mb.get(n)]}")
    return ma == mb


def compare_text(f: Path, g: Path) -> bool:
    x, y = norm_text(f.read_text()), norm_text(g.read_text())
    if x != y:
        first = [(i, u, v) for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v][:3]
        diffs.append(f"TEXT {f.relative_to(before)}: {len(x)} vs {len(y)} lines; first: {first}")
    return x == y


TEXT = (".md", ".stdout", ".txt", ".csv", ".log")
stats: dict[str, list[int]] = {}
diffs: list[str] = []
for f in sorted(p for p in before.rglob("*") if p.is_file()):
    rel = f.relative_to(before)
    g = after / rel
    s = stats.setdefault(f.suffix or "noext", [0, 0, 0])
    if not g.exists():
        diffs.append(f"MISSING in after: {rel}")
        s[2] += 1
        continue
    if f.read_bytes() == g.read_bytes():
        s[0] += 1
        continue
    if f.suffix == ".json":
        same = norm_json(json.loads(f.read_text())) == norm_json(json.loads(g.read_text()))
        if not same:
            diffs.append(f"JSON {rel} differs")
    elif f.suffix in TEXT:
        same = compare_text(f, g)
    elif f.suffix == ".zip":
        same = compare_zip(f, g)
    else:
        same = False
        diffs.append(f"BYTES {rel} differ")
    s[1 if same else 2] += 1
extra = sorted(str(p.relative_to(after)) for p in after.rglob("*") if p.is_file()
               and not (before / p.relative_to(after)).exists())
print(f"{'kind':8s} {'identical bytes':>16s} {'equal normalised':>17s} {'different':>10s}")
for k, (x, y, z) in sorted(stats.items()):
    print(f"{k:8s} {x:16d} {y:17d} {z:10d}")
print(f"files only in after: {len(extra)} {extra[:5]}")
for d in diffs:
    print(d)
sys.exit(1 if diffs or extra else 0)
