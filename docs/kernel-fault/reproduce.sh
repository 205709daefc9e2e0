#!/usr/bin/env bash
# Reproducer: BPF struct_ops congestion controls handed a garbage ssthresh/cwnd under ECN.
#
#   reproduce.sh KSRC [SECONDS] [CC ...]
#
# KSRC: a Linux source tree (for tools/testing/selftests/bpf/progs: bpf_dctcp.c,
# bpf_cubic.c, bpf_cc_cubic.c, bpf_tracing_net.h).  Builds those with clang, registers
# them with bpftool, builds a dumbbell of network namespaces (s1, s2 -> rt -> r1; HTB
# 300 Mbit/s with fq_codel marking CE above 1 ms of sojourn), then per CC runs two iperf3
# flows (client and server on that CC) for SECONDS while cc_fault_probe (tracepoints
# only) counts per CC: reductions (CWR/Recovery/Loss entries), handed_garbage (TCP stored
# a garbage ssthresh() return), episodes (a segment arrived while the socket held a
# garbage ssthresh or cwnd: TCP had sent under it).  Nothing of mltcp is loaded.
# Needs root, clang, bpftool, libbpf1, iperf3, python3.  Default CCs: bpf_dctcp
# bpf_cubic bpf_cc_cubic reno cubic; SECONDS 30.
set -euo pipefail
KSRC=${1:?usage: reproduce.sh KSRC [SECONDS] [CC ...]}
SECS=${2:-30}
shift $(( $# < 2 ? $# : 2 ))
CCS=("$@")
[ ${#CCS[@]} -gt 0 ] || CCS=(bpf_dctcp bpf_cubic bpf_cc_cubic reno cubic)
HERE=$(cd "$(dirname "$0")" && pwd)
PROGS=$KSRC/tools/testing/selftests/bpf/progs
ARCH=$(uname -m | sed 's/x86_64/x86/; s/aarch64/arm64/')
W=$(mktemp -d /tmp/kernel-fault.XXXXXX)
NS=(kfr-s1 kfr-s2 kfr-rt kfr-r1)
REGISTERED=()

cleanup() {
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    for name in "${REGISTERED[@]}"; do bpftool struct_ops unregister name "$name" >/dev/null 2>&1 || true; done
    rm -rf "$W"
}
trap cleanup EXIT INT TERM HUP

for tool in clang bpftool iperf3 python3 tc ip; do
    command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 3; }
done
[ -f "$PROGS/bpf_dctcp.c" ] || { echo "no $PROGS/bpf_dctcp.c: give a Linux source tree" >&2; exit 2; }

echo "== Linux $(uname -r) $(uname -m); SRSO: $(cat /sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow 2>/dev/null || echo n/a)"
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$W/vmlinux.h"
CFLAGS=(-O2 -g -target bpf -D__TARGET_ARCH_$ARCH -I"$W" -I"$PROGS" -I"$KSRC/tools/testing/selftests/bpf")
clang "${CFLAGS[@]}" -c "$HERE/../../kernel/cc_fault_probe.bpf.c" -o "$W/probe.o"
for cc in "${CCS[@]}"; do
    case $cc in
        bpf_dctcp) clang "${CFLAGS[@]}" -c "$PROGS/bpf_dctcp.c" -o "$W/$cc.o" ;;
        bpf_cubic) clang "${CFLAGS[@]}" -include "$HERE/cubic_compat.h" -c "$PROGS/bpf_cubic.c" -o "$W/$cc.o" ;;
        bpf_cc_cubic) clang "${CFLAGS[@]}" -c "$PROGS/bpf_cc_cubic.c" -o "$W/$cc.o" ;;
        *) continue ;;   # a native CC
    esac
    bpftool struct_ops register "$W/$cc.o" >/dev/null
    REGISTERED+=("$cc")
done

for ns in "${NS[@]}"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip netns exec kfr-rt sysctl -qw net.ipv4.ip_forward=1
sub=1
for h in s1 s2 r1; do
    [ $h = r1 ] && sub=101
    ip link add name "$h" netns kfr-rt type veth peer name eth0 netns "kfr-$h"
    ip -n "kfr-$h" addr add "10.251.$sub.2/24" dev eth0
    ip -n "kfr-$h" link set eth0 up gso_max_segs 1
    ip -n "kfr-$h" route add default via "10.251.$sub.1"
    ip -n kfr-rt addr add "10.251.$sub.1/24" dev "$h"
    ip -n kfr-rt link set "$h" up
    ip netns exec "kfr-$h" sysctl -qw net.ipv4.tcp_ecn=1 net.ipv4.tcp_no_metrics_save=1
    sub=$((sub + 1))
done
tc -n kfr-rt qdisc replace dev r1 root handle 1: htb default 10
tc -n kfr-rt class add dev r1 parent 1: classid 1:10 htb rate 300mbit ceil 300mbit burst 500k cburst 500k
tc -n kfr-rt qdisc add dev r1 parent 1:10 handle 10: fq_codel limit 1000 ce_threshold 1ms

for cc in "${CCS[@]}"; do
    ip netns exec kfr-r1 sysctl -qw net.ipv4.tcp_congestion_control="$cc"
    python3 "$HERE/probe.py" "$W/probe.o" "$((SECS + 3))" > "$W/$cc.probe" &
    probe=$!
    sleep 1
    ip netns exec kfr-r1 iperf3 -s -p 5201 -1 -D
    ip netns exec kfr-r1 iperf3 -s -p 5202 -1 -D
    sleep 0.5
    ip netns exec kfr-s1 iperf3 -c 10.251.101.2 -p 5201 -C "$cc" -t "$SECS" > "$W/$cc.c1" &
    ip netns exec kfr-s2 iperf3 -c 10.251.101.2 -p 5202 -C "$cc" -t "$SECS" > "$W/$cc.c2" &
    wait %2 %3 2>/dev/null || true
    wait $probe
    drops=$(tc -n kfr-rt -s qdisc show dev r1 | awk '/fq_codel/{f=1} f&&/dropped/{gsub(",","");print $7; exit}')
    echo "== $cc, ${SECS} s, fq_codel drops so far: $drops"
    grep -E "^$cc " "$W/$cc.probe" || echo "$cc: no segments seen (did iperf3 run?)"
done
