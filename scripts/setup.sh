#!/usr/bin/env bash
# Prepare a fresh machine for mltcp: Debian packages (only those missing), bpffs,
# and a virtual environment in .venv with mltcp installed (editable).
#
#   scripts/setup.sh        everything the tests use: the lab (numpy, matplotlib,
#                           pyroute2, numba), the test tools (pytest, ruff, scapy), the
#                           sweep (Dask, pandas, pyarrow), ns3 (ns-3 bindings, cppyy), torch
#                           (PyTorch with its CUDA wheels, ~5 GB, and torchvision: the DDP
#                           workload and the hook's tests) and rl (Gymnasium,
#                           stable-baselines3, sb3-contrib: training the RL scheduler)
#   scripts/setup.sh demo   what `mltcp demo` needs and nothing more: the lab extra
#                           (~0.4 GB) and the toolchain that builds the eBPF objects
#
# ethtool is only for the test that compares the tuner's ioctl reads with it; iperf3 for
# the CPU-bound datapath benchmark and the kernel-fault reproducer in docs/kernel-fault;
# openssh for the hosts backend's tests.
# Idempotent: a second run installs nothing and takes a second; a full setup serves the
# demo too.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
case $what in
  all) EXTRAS=lab,test,sweep,ns3,torch,rl ;;
  demo) EXTRAS=lab ;;
  *) echo "setup: unknown argument '$what': use 'demo' (what the demo needs) or nothing (everything)" >&2
     exit 2 ;;
esac

# What builds and loads the eBPF datapath and runs the testbed (the demo's); the rest only
# the tests use (openssh-server/-client: the hosts backend's tests run a real sshd per
# namespace host).
DEBS=(clang llvm libbpf-dev bpftool iproute2 util-linux procps)
[[ $what == all ]] && DEBS+=(ethtool iperf3 openssh-server openssh-client)
missing=()
for pkg in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages ${missing[*]}: run as root (sudo) to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  # The packages' maintainer scripts must not start daemons here (openssh-server would
  # start an sshd on the machine's own port 22): the tests start their own servers.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ $(id -u) -eq 0 ]] && ! mountpoint -q /sys/fs/bpf; then
  mount -t bpf bpf /sys/fs/bpf
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
# One stamp per selection; the full one also stands for the demo's (a superset).
full=.venv/.mltcp-installed
stamp=$full
[[ $what == demo ]] && stamp=.venv/.mltcp-installed-demo
current() { [[ -f $1 && ! pyproject.toml -nt $1 && ! setup.py -nt $1 ]]; }
if ! current "$stamp" && ! current "$full"; then
  echo "setup: installing mltcp[$EXTRAS] into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  touch "$stamp"
fi
