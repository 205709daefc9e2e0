// SPDX-License-Identifier: GPL-2.0-only
/*
 * ecn_marker - DCTCP-style step ECN marking on a real qdisc's backlog.
 *
 * This machine has no RED qdisc, so this helper gives the bottleneck the
 * marking DCTCP expects: every ECN-capable packet that arrives while the
 * device's root qdisc holds more than K bytes gets CE (RFC 8257 step
 * marking, like RED with min = max = K and instantaneous queue).  The
 * qdisc_enqueue/qdisc_dequeue tracepoints copy the root qdisc's byte backlog
 * into the watched device's entry; a cls_bpf program on the device's clsact
 * egress, which runs just before enqueue, marks against it.  Non-ECT packets
 * pass unmarked (the qdisc drops them when full, as a tail-drop queue would).
 */
#include "mltcp.h"

/* ifindex is only unique within a namespace: both ends of a veth pair in two
 * namespaces often share one, so the namespace's cookie is part of the key. */
struct mltcp_marker_key {
	__u32 ifindex;
	__u32 _pad;
	__u64 netns_cookie;
};

struct mltcp_marker {
	__u32 k_bytes;        /* marking threshold */
	__u32 _pad;
	__u64 backlog;        /* root qdisc backlog after the last enqueue/dequeue */
	__u64 max_backlog;
	__u64 packets;        /* packets seen by the marker */
	__u64 marked;         /* CE marks set */
	__u64 not_ect;        /* packets over K that were not ECN-capable */
	__u64 backlog_sum;    /* sum of backlog seen at arrival (mean queue = sum / packets) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct mltcp_marker_key);
	__type(value, struct mltcp_marker);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_markers SEC(".maps");

static __always_inline void record_backlog(struct Qdisc *q, const struct netdev_queue *txq)
{
	struct net_device *dev = txq->dev;
	struct mltcp_marker_key key = {};
	struct mltcp_marker *m;
	__u64 backlog;

	if (!dev)
		return;
	key.ifindex = dev->ifindex;
	key.netns_cookie = dev->nd_net.net->net_cookie;
	m = bpf_map_lookup_elem(&mltcp_markers, &key);
	if (!m)
		return;
	/* Only the root qdisc's backlog is the device's queue. */
	if (q->parent != 0xffffffff)
		return;
	backlog = q->qstats.backlog;
	m->backlog = backlog;
	if (backlog > m->max_backlog)
		m->max_backlog = backlog;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(mltcp_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq,
	     struct sk_buff *skb)
{
	record_backlog(q, txq);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(mltcp_qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	record_backlog(q, txq);
	return 0;
}

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

SEC("tc")
int mltcp_ecn_mark(struct __sk_buff *skb)
{
	struct mltcp_marker_key key = {};
	struct sk_buff *kskb;
	struct mltcp_marker *m;
	__u64 backlog;

	/* bpf_get_netns_cookie() would give the socket's (or init's) namespace: forwarded
	 * packets have no socket.  The device's namespace is what identifies the queue. */
	kskb = bpf_cast_to_kern_ctx(skb);
	if (!kskb->dev)
		return 0; /* TC_ACT_OK */
	key.ifindex = kskb->dev->ifindex;
	key.netns_cookie = kskb->dev->nd_net.net->net_cookie;
	m = bpf_map_lookup_elem(&mltcp_markers, &key);
	if (!m)
		return 0; /* TC_ACT_OK */
	backlog = m->backlog;
	__sync_fetch_and_add(&m->packets, 1);
	__sync_fetch_and_add(&m->backlog_sum, backlog);
	if (backlog > m->k_bytes) {
		if (bpf_skb_ecn_set_ce(skb))
			__sync_fetch_and_add(&m->marked, 1);
		else
			__sync_fetch_and_add(&m->not_ect, 1);
	}
	return 0; /* TC_ACT_OK */
}
