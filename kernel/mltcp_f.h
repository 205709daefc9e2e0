/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mltcp_f.h - F and the iteration tracker, shared by every MLTCP congestion module.
 *
 * MLTCP scales a flow's window growth by F(bytes_ratio), where bytes_ratio is
 * the fraction of its training job's per-iteration byte budget already acked
 * on this host.  The tracker (mltcp_on_ack, mltcp_on_tx_start, mltcp_boundary)
 * counts a job's acked bytes in its job state and finds iteration boundaries
 * (budget wrap, idle gap unless the job signals, explicit signal); mltcp_f_fixed computes F from it and
 * mltcp_scale_acked applies F to congestion avoidance.  The flow table and the
 * reduction counters `mltcp status` shows are written here too.  The tracker
 * mirrors mltcp/core/iteration.py (on_ack, on_tx_start) exactly, and F
 * mltcp/core/aggressiveness.py (f_fixed); change both together
 * (tests/test_kernel_behaviour.py checks the tracker against a real sender,
 * tests/test_kernel_abi.py F case by case).
 */
#ifndef __MLTCP_F_H
#define __MLTCP_F_H

#include "mltcp.h"
#include "mltcp_window.h"   /* mltcp_contain_cwnd, at a restart */

/* F = intercept + slope * min(bytes/budget, 1), optionally capped; Q16.16. */
static __always_inline __u32 mltcp_f_fixed(const struct mltcp_job_cfg *cfg, __u64 bytes,
					   __u64 budget)
{
	__u64 ratio, f;

	if (!budget)
		return MLTCP_FP_ONE;
	ratio = (bytes << MLTCP_FP_SHIFT) / budget;
	if (ratio > MLTCP_FP_ONE)
		ratio = MLTCP_FP_ONE;
	f = cfg->intercept_fp + (((__u64)cfg->slope_fp * ratio) >> MLTCP_FP_SHIFT);
	if (cfg->cap_fp && f > cfg->cap_fp)
		f = cfg->cap_fp;
	return (__u32)f;
}

/* End the current iteration (idle gap or explicit signal); called under st->lock. */
static __always_inline void mltcp_boundary(struct mltcp_job_state *st, __u64 tail)
{
	if (st->bytes_since_gap) {
		st->hist[st->hist_head & (MLTCP_HISTORY - 1)] = st->bytes_since_gap;
		st->hist_head = (st->hist_head + 1) & (MLTCP_HISTORY - 1);
		if (st->hist_len < MLTCP_HISTORY)
			st->hist_len++;
		st->last_iter_bytes = st->bytes_since_gap;
	}
	/* A tail up to budget/16 after a wrap belongs to the iteration already counted. */
	if (st->bytes_in_iter > tail)
		st->iteration++;
	st->bytes_in_iter = 0;
	st->bytes_since_gap = 0;
}

/*
 * CA_EVENT_TX_START: a connection sends after having nothing in flight.  With
 * nothing outstanding at all (packets_out == 0; an RTO retransmission has
 * packets out) and either an end-of-iteration signal pending or the job silent
 * for longer than gap_ns (it was computing), that ends its iteration.  A job
 * whose training loop signals (MLTCP_JOB_SIGNALS) takes its boundaries from the
 * signal alone: a silence inside its communication is not a boundary.  The
 * restart counts as activity, so the job's other connections starting a moment
 * later add no boundary.
 */
static __always_inline void mltcp_on_tx_start(struct sock *sk, struct mltcp_flow *fl)
{
	struct mltcp_job_state *st;
	struct mltcp_job_cfg *cfg;
	__u32 job = fl->job_id;
	__u64 now;

	/* An ACK that found nothing in flight never reaches cong_control(), yet it can
	 * undo a reduction (a D-SACK): contain that window before the first segment of
	 * the restart is followed by a burst. */
	mltcp_contain_cwnd(sk, fl);
	if (!job || job >= MLTCP_MAX_JOBS || mltcp_tcp_sk(sk)->packets_out)
		return;
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (!cfg || !st || !mltcp_cfg_usable(cfg))
		return;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&st->lock);
	if (cfg->signal_seq != st->signal_seen) {
		/* The training loop signalled the end of an iteration: it takes effect here,
		 * at the next restart, when this connection's bytes are all acknowledged;
		 * taken at the next ACK it cut off the iteration's trailing ACKs. */
		st->signal_seen = cfg->signal_seq;
		st->signals++;
		mltcp_boundary(st, cfg->budget >> MLTCP_TAIL_SHIFT);
		st->f_fp = mltcp_f_fixed(cfg, 0, cfg->budget);
	} else if (!(cfg->flags & MLTCP_JOB_SIGNALS) && st->last_ack_ns &&
		   now - st->last_ack_ns > cfg->gap_ns) {
		st->gaps++;
		mltcp_boundary(st, cfg->budget >> MLTCP_TAIL_SHIFT);
		st->f_fp = mltcp_f_fixed(cfg, 0, cfg->budget);
	}
	st->last_ack_ns = now;
	bpf_spin_unlock(&st->lock);
}

/*
 * Account the bytes this ACK delivered to the flow's job and return the job's
 * F.  Called from pkts_acked(), i.e. on every ACK that acks data, also during
 * recovery, so iteration boundaries never lag behind the wire.
 */
static __always_inline __u32 mltcp_on_ack(struct sock *sk, struct mltcp_flow *fl, __u32 cc)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	struct mltcp_job_state *st;
	struct mltcp_job_cfg *cfg;
	__u64 acked = tp->bytes_acked;
	__u64 delta = (__u32)((__u32)acked - fl->last_bytes_acked);
	__u32 job = fl->job_id;
	__u64 now, budget;
	int stale;
	__u32 f;

	fl->last_bytes_acked = (__u32)acked;
	if (!job || job >= MLTCP_MAX_JOBS) {
		fl->f_fp = MLTCP_FP_ONE;
		return MLTCP_FP_ONE;
	}
	cfg = bpf_map_lookup_elem(&mltcp_job_cfg, &job);
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (!cfg || !st || !mltcp_cfg_usable(cfg)) {
		fl->f_fp = MLTCP_FP_ONE;
		return MLTCP_FP_ONE;
	}
	now = bpf_ktime_get_ns();
	stale = mltcp_cfg_stale(cfg, now);
	if (!delta) {
		f = stale ? MLTCP_FP_ONE : st->f_fp;
		goto out;
	}
	budget = cfg->budget;

	bpf_spin_lock(&st->lock);
	if (!st->bytes_in_iter)
		st->iter_start_ns = now;
	st->bytes_in_iter += delta;
	st->bytes_since_gap += delta;
	st->total_bytes += delta;
	if (budget && st->bytes_in_iter >= budget) {
		st->iteration++;
		st->wraps++;
		st->bytes_in_iter -= budget;
		if (st->bytes_in_iter >= budget)
			st->bytes_in_iter = 0;
		st->iter_start_ns = now;
	}
	st->last_ack_ns = now;
	f = stale ? MLTCP_FP_ONE : mltcp_f_fixed(cfg, st->bytes_in_iter, budget);
	st->f_fp = f;
	bpf_spin_unlock(&st->lock);
out:
	fl->f_fp = f;
	if (!fl->next_report_us || (__s32)((__u32)(now >> 10) - fl->next_report_us) >= 0) {
		struct mltcp_flow_info *info;
		__u64 key = (__u64)sk;

		fl->next_report_us = (__u32)((now + MLTCP_REPORT_NS) >> 10) | 1;
		info = bpf_map_lookup_elem(&mltcp_flows, &key);
		if (!info) {
			struct mltcp_flow_info init = {};

			init.job_id = job;
			init.cc = cc;
			init.family = sk->__sk_common.skc_family;
			init.sport = sk->__sk_common.skc_num;
			init.dport = bpf_ntohs(sk->__sk_common.skc_dport);
			if (init.family == AF_INET) {
				init.saddr[0] = sk->__sk_common.skc_rcv_saddr;
				init.daddr[0] = sk->__sk_common.skc_daddr;
			} else {
				init.saddr[0] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[0];
				init.saddr[1] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[1];
				init.saddr[2] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[2];
				init.saddr[3] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[3];
				init.daddr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
				init.daddr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
				init.daddr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
				init.daddr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
			}
			bpf_map_update_elem(&mltcp_flows, &key, &init, BPF_NOEXIST);
			info = bpf_map_lookup_elem(&mltcp_flows, &key);
		}
		if (info) {
			info->cwnd = tp->snd_cwnd;
			info->ssthresh = tp->snd_ssthresh;
			info->srtt_us = tp->srtt_us >> 3;
			info->f_fp = f;
			info->bytes_acked = acked;
			info->updated_ns = now;
		}
	}
	return f;
}

/* Count a window reduction (ssthresh() call) for the flow and its job. */
static __always_inline void mltcp_count_reduction(struct sock *sk, struct mltcp_flow *fl,
						  int is_loss)
{
	struct mltcp_flow_info *info;
	struct mltcp_job_state *st;
	__u64 key = (__u64)sk;
	__u32 job = fl->job_id;

	if (!job || job >= MLTCP_MAX_JOBS)
		return;
	info = bpf_map_lookup_elem(&mltcp_flows, &key);
	if (info) {
		if (is_loss)
			__sync_fetch_and_add(&info->loss_reductions, 1);
		else
			__sync_fetch_and_add(&info->cwnd_reductions, 1);
	}
	st = bpf_map_lookup_elem(&mltcp_job_state, &job);
	if (st && !is_loss)
		__sync_fetch_and_add(&st->cwnd_reductions, 1);
}

/*
 * Scale the packets an ACK acknowledged by F, carrying the fraction, so that
 * congestion avoidance grows F times faster.  Slow start is left alone: the
 * design scales the additive (or cubic) increase only.
 */
static __always_inline __u32 mltcp_scale_acked(struct sock *sk, struct mltcp_flow *fl,
					       __u32 acked)
{
	struct tcp_sock *tp = mltcp_tcp_sk(sk);
	__u64 scaled;

	if (fl->f_fp == MLTCP_FP_ONE || tp->snd_cwnd < tp->snd_ssthresh)
		return acked;
	scaled = (__u64)acked * fl->f_fp + fl->frac;
	fl->frac = (__u16)(scaled & (MLTCP_FP_ONE - 1));
	return (__u32)(scaled >> MLTCP_FP_SHIFT);
}

#endif /* __MLTCP_F_H */
