#!/usr/bin/env bash
# The identity corpus: deterministic outputs of the lab (fluid and DCQCN compares of every
# shipped scenario, one ns-3 run, a sweep, cluster experiments of every paper's setup cut
# to their first jobs, the contention grid, a tiny RL training), written under OUT, to be
# compared before and after a refactor with compare.py:
#   git checkout OLD && scripts/identity/run.sh /tmp/before
#   git checkout NEW && scripts/identity/run.sh /tmp/after
#   python3 scripts/identity/compare.py /tmp/before /tmp/after [old=new ...]
# About 25 minutes on 2 cores; needs no root (nothing here touches the kernel).
set -u
OUT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../.." && pwd)}
CONFIGS=${CONFIGS:-$HERE/configs}
M=${M:-$REPO/.venv/bin/mltcp}; PY=${PY:-$REPO/.venv/bin/python}
mkdir -p "$OUT"; cd "$REPO"
t0=$(date +%s)
for ex in compatible-pair compatible-pair-droptail compatible-pair-roce dctcp-pair incompatible-pair leaf-spine model-parallel three-jobs; do
  $M compare $ex --backend fluid --out "$OUT/fluid/$ex" > "$OUT/fluid-$ex.stdout" 2>&1; echo "fluid $ex $?"
done
for ex in compatible-pair-roce compatible-pair three-jobs; do
  $M compare $ex --backend dcqcn --out "$OUT/dcqcn/$ex" > "$OUT/dcqcn-$ex.stdout" 2>&1; echo "dcqcn $ex $?"
done
$M run compatible-pair --backend ns3 --scheme mltcp-cubic --seed 0 --out "$OUT/ns3" > "$OUT/ns3.stdout" 2>&1; echo "ns3 $?"
$M sweep compatible-pair --param slope=1,2 --seeds 0-1 --parallel 1 --format csv --out "$OUT/sweep" > "$OUT/sweep.stdout" 2>&1; echo "sweep $?"
$M cluster run small --out "$OUT/cluster/small" > "$OUT/cluster-small.stdout" 2>&1; echo "cluster small $?"
for c in ada cassini vclos deepshare; do
  $M cluster run "$CONFIGS/$c.toml" --out "$OUT/cluster/$c" > "$OUT/cluster-$c.stdout" 2>&1; echo "cluster $c $?"
done
$PY bench/bench_cs_grid.py --out "$OUT/cs-grid.json" > "$OUT/cs-grid.stdout" 2>&1; echo "cs-grid $?"
$M cluster rl-train --out "$OUT/rl" --name tiny --jobs 8 --duration-s 300 --round-s 30 --timesteps 96 --n-steps 32 > "$OUT/rl.stdout" 2>&1; echo "rl-train $?"
echo "took $(( $(date +%s) - t0 )) s"
