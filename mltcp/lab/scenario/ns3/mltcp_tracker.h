// MLTCP's per-job iteration tracker and F, for the ns-3 congestion classes.
//
// This is mltcp/iteration.py (IterationTracker) and mltcp/aggressiveness.py (f_fixed,
// scale_acked) in C++, operation for operation and in the same Q16.16 fixed point as
// the eBPF datapath (kernel/mltcp_f.h), so that ns-3, the kernel and the Python reference
// count iterations and compute F identically.  tests/test_ns3.py feeds the same event
// sequences to this class and to the Python tracker and compares every field.
//
// Departures from the Python reference: none in behaviour; the explicit training-loop
// signal is not wired (ns-3 jobs end iterations by budget and idle gap only).
#pragma once
#include <cstdint>
#include <deque>

// F's parameter bounds have one source, the Python spec (mltcp/core/aggressiveness.py);
// the loader (mltcp.lab.scenario.ns3.sim.include) defines them before including this header.
#if !defined(MLTCP_MAX_SLOPE) || !defined(MLTCP_MIN_INTERCEPT) || \
    !defined(MLTCP_MAX_INTERCEPT) || !defined(MLTCP_MAX_CAP)
#error "define F's bounds first: include through mltcp.lab.scenario.ns3.sim.include()"
#endif

namespace mltcp {

constexpr uint32_t kFpShift = 16;
constexpr uint64_t kFpOne = 1ull << kFpShift;
constexpr uint64_t kFpMask = kFpOne - 1;
constexpr std::size_t kHistoryLen = 8;

struct Aggressiveness {
  uint64_t slope_fp = 0;
  uint64_t intercept_fp = kFpOne;
  uint64_t cap_fp = 0;  // 0 = no cap

  // F(bytes_in_iter / budget) in Q16.16; an unknown budget (0) gives exactly 1.
  uint64_t FFixed(uint64_t bytes_in_iter, uint64_t budget) const {
    if (budget == 0) return kFpOne;
    uint64_t ratio_fp = (bytes_in_iter << kFpShift) / budget;
    if (ratio_fp > kFpOne) ratio_fp = kFpOne;
    uint64_t f = intercept_fp + ((slope_fp * ratio_fp) >> kFpShift);
    if (cap_fp && f > cap_fp) f = cap_fp;
    return f;
  }
};

// acked * F with the sub-unit remainder carried in *frac (Q16.16), as scale_acked().
inline uint64_t ScaleAcked(uint64_t acked, uint64_t f_fp, uint64_t* frac) {
  uint64_t s = acked * f_fp + *frac;
  *frac = s & kFpMask;
  return s >> kFpShift;
}

class IterationTracker {
 public:
  uint64_t budget = 0;
  uint64_t gap_ns = 5000000;
  uint32_t tail_shift = 4;
  Aggressiveness agg;

  uint64_t bytes_in_iter = 0;
  uint64_t bytes_since_gap = 0;
  uint64_t iteration = 0;
  uint64_t last_ack_ns = 0;
  uint64_t last_iter_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t f_fp = kFpOne;
  std::deque<uint64_t> history;

  // A connection of the job starts sending after idling; true if that was a boundary.
  bool OnTxStart(uint64_t now_ns, uint64_t packets_out) {
    if (packets_out) return false;
    bool boundary = last_ack_ns != 0 && now_ns - last_ack_ns > gap_ns;
    if (boundary) {
      Boundary();
      f_fp = agg.FFixed(0, budget);
    }
    last_ack_ns = now_ns;
    return boundary;
  }

  // Account delta_bytes newly acked at now_ns; returns the new F (Q16.16).
  uint64_t OnAck(uint64_t delta_bytes, uint64_t now_ns) {
    bytes_in_iter += delta_bytes;
    bytes_since_gap += delta_bytes;
    total_bytes += delta_bytes;
    if (budget > 0 && bytes_in_iter >= budget) {
      iteration += 1;
      bytes_in_iter -= budget;
      if (bytes_in_iter >= budget) bytes_in_iter = 0;
    }
    last_ack_ns = now_ns;
    f_fp = budget == 0 ? kFpOne : agg.FFixed(bytes_in_iter, budget);
    return f_fp;
  }

 private:
  void Boundary() {
    if (bytes_since_gap > 0) {
      history.push_back(bytes_since_gap);
      while (history.size() > kHistoryLen) history.pop_front();
      last_iter_bytes = bytes_since_gap;
    }
    if (bytes_in_iter > (budget >> tail_shift)) iteration += 1;
    bytes_in_iter = 0;
    bytes_since_gap = 0;
  }
};

}  // namespace mltcp
