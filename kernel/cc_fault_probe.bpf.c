// SPDX-License-Identifier: GPL-2.0-only
/*
 * cc_fault_probe - an independent witness of the kernel fault of
 * docs/known-issues.md (garbage ssthresh/cwnd from BPF struct_ops congestion
 * controls).  Not a congestion control: tracepoints only (tp_btf, so it runs
 * for every TCP socket whatever its algorithm, native or BPF, ours or not), no
 * shared code with the mltcp modules, nothing written to the socket.
 *
 * Per congestion control name it counts:
 *  - REDUCTIONS: entries into CWR, Recovery or Loss (tcp_cong_state_set), the
 *    exposure: each one called the algorithm's ssthresh();
 *  - HANDED_GARBAGE: at such an entry, tp->snd_ssthresh beyond any real window
 *    (> 2^20 segments and not "infinite").  The tracepoint fires in
 *    tcp_set_ca_state() right after TCP stored ssthresh()'s return and before
 *    the algorithm's own set_state() runs, so this is what TCP received: the
 *    fault itself, whatever the module does about it afterwards;
 *  - EPISODES: a segment arrived (tcp_probe, before TCP processes it) while the
 *    socket held a garbage ssthresh or cwnd, i.e. the garbage outlived the ACK
 *    that brought it and TCP transmitted under it: what turns into bursts.
 *    Counted once per episode (until a clean segment is seen again);
 *  - SEGMENTS_WITH_GARBAGE: every such segment;
 *  - EPISODES_CWND / EPISODES_OPEN: episodes that began with a garbage cwnd (not
 *    ssthresh), and outside a reduction (CA state Open or Disorder);
 *  - BURSTS: garbage-window episodes in which TCP sent more than
 *    PROBE_BURST_SEGMENTS segments between two incoming segments (snd_nxt moved
 *    that far): what the window let out.  A garbage window that nothing is sent
 *    under (an undo on the last ACKs of a closing connection, nothing left to
 *    send) is an episode but no burst.
 * The last garbage value is kept per name (it identifies the stale stack word).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char _license[] SEC("license") = "GPL";

#define PROBE_SANE_WINDOW (1U << 20)
#define PROBE_INFINITE_SSTHRESH 0x7fffffffU
/* More than one incoming ACK ever releases under a sane window here (delayed ACKs
 * cover two segments; the bursts of the fault were 130-210 packets). */
#define PROBE_BURST_SEGMENTS 64

enum probe_count {
	PROBE_REDUCTIONS = 0,
	PROBE_HANDED_GARBAGE = 1,
	PROBE_EPISODES = 2,
	PROBE_SEGMENTS_WITH_GARBAGE = 3,
	PROBE_SEGMENTS = 4,
	PROBE_EPISODES_CWND = 5,     /* episodes that began with a garbage cwnd */
	PROBE_EPISODES_OPEN = 6,     /* episodes that began outside a reduction (Open/Disorder) */
	PROBE_BURSTS = 7,            /* garbage-window episodes TCP sent a burst in */
	PROBE_NCOUNTS = 8,
};

struct probe_key {
	char cc[16];
};

struct probe_counts {
	__u64 n[PROBE_NCOUNTS];
	__u64 last_bad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct probe_key);
	__type(value, struct probe_counts);
} probe_counts SEC(".maps");

/* Sockets inside an episode (keyed by address; an LRU so closed sockets age out):
 * 1 in an episode, 2 once its burst was counted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} probe_in_episode SEC(".maps");

/* Each socket's snd_nxt at its last incoming segment. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} probe_last_nxt SEC(".maps");

static __always_inline struct probe_counts *counts_of(struct tcp_sock *tp)
{
	struct probe_counts zero = {}, *c;
	struct probe_key key = {};

	bpf_probe_read_kernel_str(key.cc, sizeof(key.cc), tp->inet_conn.icsk_ca_ops->name);
	c = bpf_map_lookup_elem(&probe_counts, &key);
	if (c)
		return c;
	bpf_map_update_elem(&probe_counts, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&probe_counts, &key);
}

static __always_inline __u32 garbage_value(struct tcp_sock *tp)
{
	if (tp->snd_ssthresh > PROBE_SANE_WINDOW && tp->snd_ssthresh != PROBE_INFINITE_SSTHRESH)
		return tp->snd_ssthresh;
	if (tp->snd_cwnd > PROBE_SANE_WINDOW)
		return tp->snd_cwnd;
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(probe_state_set, struct sock *sk, const __u8 ca_state)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct probe_counts *c;

	if (!tp || ca_state < TCP_CA_CWR)
		return 0;
	c = counts_of(tp);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->n[PROBE_REDUCTIONS], 1);
	if (tp->snd_ssthresh > PROBE_SANE_WINDOW && tp->snd_ssthresh != PROBE_INFINITE_SSTHRESH) {
		__sync_fetch_and_add(&c->n[PROBE_HANDED_GARBAGE], 1);
		c->last_bad = tp->snd_ssthresh;
	}
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(probe_segment, struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct probe_counts *c;
	__u64 key = (__u64)sk;
	__u8 one = 1, *inside;
	__u32 bad, nxt, sent, *last;

	if (!tp)
		return 0;
	c = counts_of(tp);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->n[PROBE_SEGMENTS], 1);
	last = bpf_map_lookup_elem(&probe_last_nxt, &key);
	nxt = tp->snd_nxt;
	sent = last ? nxt - *last : 0;
	bpf_map_update_elem(&probe_last_nxt, &key, &nxt, BPF_ANY);
	inside = bpf_map_lookup_elem(&probe_in_episode, &key);
	bad = garbage_value(tp);
	if (bad) {
		__sync_fetch_and_add(&c->n[PROBE_SEGMENTS_WITH_GARBAGE], 1);
		c->last_bad = bad;
		if (!inside) {
			__sync_fetch_and_add(&c->n[PROBE_EPISODES], 1);
			if (tp->snd_cwnd > PROBE_SANE_WINDOW)
				__sync_fetch_and_add(&c->n[PROBE_EPISODES_CWND], 1);
			if (BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state) < TCP_CA_CWR)
				__sync_fetch_and_add(&c->n[PROBE_EPISODES_OPEN], 1);
			bpf_map_update_elem(&probe_in_episode, &key, &one, BPF_ANY);
			inside = bpf_map_lookup_elem(&probe_in_episode, &key);
		}
		if (inside && *inside == 1 && tp->snd_cwnd > PROBE_SANE_WINDOW &&
		    sent > PROBE_BURST_SEGMENTS * tp->mss_cache) {
			__sync_fetch_and_add(&c->n[PROBE_BURSTS], 1);
			*inside = 2;
		}
	} else if (inside) {
		bpf_map_delete_elem(&probe_in_episode, &key);
	}
	return 0;
}
