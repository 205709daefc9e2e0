#!/usr/bin/env bash
# Prepare a fresh machine for mltcp: Debian packages (only those missing), bpffs,
# and a virtual environment in .venv with mltcp installed (editable), the lab (numpy,
# matplotlib, pyroute2), its test tools (pytest, ruff, scapy) and the sweep (Dask,
# pandas, pyarrow), ns3 (ns-3 bindings, cppyy) and torch (PyTorch with its CUDA wheels,
# several GB, and torchvision: the DDP workload and the hook's tests) and rl (Gymnasium,
# stable-baselines3, sb3-contrib: the RL scheduler) extras, so that
# every test runs.
# ethtool is only for the test that compares the tuner's ioctl reads with it; iperf3 for
# the CPU-bound datapath benchmark and the kernel-fault reproducer in docs/kernel-fault.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# openssh-server/-client: the hosts backend's tests run a real sshd per namespace host.
DEBS=(clang llvm libbpf-dev bpftool iproute2 util-linux procps ethtool iperf3
      openssh-server openssh-client)
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
stamp=.venv/.mltcp-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp ]]; then
  echo "setup: installing mltcp and its test tools into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[lab,test,sweep,ns3,torch,rl]'
  touch "$stamp"
fi
