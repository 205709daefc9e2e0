// MLTCP versions of ns-3's TcpLinuxReno, TcpCubic and TcpDctcp.
//
// How they depart from ns-3's classes: in congestion avoidance, the segments acked
// that the algorithm's window growth sees are multiplied by F(bytes_ratio) (Q16.16,
// with the remainder carried per flow), where bytes_ratio comes from the flow's job
// tracker (mltcp_tracker.h), shared by every connection of the job on the same host.
// Slow start, the multiplicative decrease and DCTCP's alpha are unchanged.  A flow
// of no job (JobId 0) is the unmodified algorithm, as in the kernel datapath.
//
// MltcpCubic scales CUBIC's per-ACK growth only.  The kernel's mltcp_cubic also
// advances CUBIC's clock (epoch start) by F; ns-3 keeps that state private, so this
// class cannot, and its unfairness at equal F is the smaller of the two.  Both keep
// the kernel CUBIC's growth ceiling while F > 1: at most one segment per two acked
// (x1.5 per round trip), at most one segment of unused credit carried.
#pragma once
#include "ns3/double.h"
#include "ns3/nstime.h"
#include "ns3/object.h"
#include "ns3/simulator.h"
#include "ns3/tcp-cubic.h"
#include "ns3/tcp-dctcp.h"
#include "ns3/tcp-linux-reno.h"
#include "ns3/tcp-socket-state.h"
#include "ns3/uinteger.h"

#include "mltcp_tracker.h"

#include <cmath>
#include <map>
#include <utility>

namespace ns3 {

// Trackers by (job id, node id): a job's bytes_ratio is per job per host.
class MltcpJobs {
 public:
  static mltcp::IterationTracker& Get(uint32_t job, uint32_t node) {
    return Table()[{job, node}];
  }
  static bool Has(uint32_t job, uint32_t node) { return Table().count({job, node}) > 0; }
  static void Configure(uint32_t job, uint32_t node, uint64_t budget, double slope,
                        double intercept, double cap, uint64_t gap_ns) {
    mltcp::IterationTracker& t = Get(job, node);
    t.budget = budget;
    t.gap_ns = gap_ns;
    t.agg.slope_fp = ToFixed(slope);
    t.agg.intercept_fp = ToFixed(intercept);
    t.agg.cap_fp = cap > 0 ? ToFixed(cap) : 0;
  }
  static void Clear() { Table().clear(); }
  // Q16.16 rounded half to even, as Python's round() in Aggressiveness.to_fixed().
  static uint64_t ToFixed(double x) {
    return static_cast<uint64_t>(std::nearbyint(x * mltcp::kFpOne));
  }

 private:
  static std::map<std::pair<uint32_t, uint32_t>, mltcp::IterationTracker>& Table() {
    static std::map<std::pair<uint32_t, uint32_t>, mltcp::IterationTracker> table;
    return table;
  }
};

// One job's MLTCP parameters on one host, as ns-3 attributes named after the Python
// spec (Aggressiveness: slope, intercept, cap; the tracker: budget, gap): Install()
// configures the tracker that every MLTCP flow tagged (JobId, NodeId) feeds.
class MltcpJobConfig : public Object {
 public:
  static TypeId GetTypeId() {
    static TypeId tid =
        TypeId("ns3::MltcpJobConfig")
            .SetParent<Object>()
            .SetGroupName("Internet")
            .AddConstructor<MltcpJobConfig>()
            .AddAttribute("JobId", "the job (1..255), as the flows' JobId", UintegerValue(1),
                          MakeUintegerAccessor(&MltcpJobConfig::m_job),
                          MakeUintegerChecker<uint32_t>(1, 255))
            .AddAttribute("NodeId", "the host, as the flows' NodeId", UintegerValue(0),
                          MakeUintegerAccessor(&MltcpJobConfig::m_node),
                          MakeUintegerChecker<uint32_t>())
            .AddAttribute("Budget", "bytes the job sends per iteration from this host "
                          "(0: unknown, F = 1)", UintegerValue(0),
                          MakeUintegerAccessor(&MltcpJobConfig::m_budget),
                          MakeUintegerChecker<uint64_t>())
            // Ranges: the Python spec's (MLTCP_* come from mltcp.core.aggressiveness).
            .AddAttribute("Slope", "F's slope", DoubleValue(1.0),
                          MakeDoubleAccessor(&MltcpJobConfig::m_slope),
                          MakeDoubleChecker<double>(0.0, MLTCP_MAX_SLOPE))
            .AddAttribute("Intercept", "F's intercept", DoubleValue(1.0),
                          MakeDoubleAccessor(&MltcpJobConfig::m_intercept),
                          MakeDoubleChecker<double>(MLTCP_MIN_INTERCEPT, MLTCP_MAX_INTERCEPT))
            .AddAttribute("Cap", "F's cap (0: none)", DoubleValue(0.0),
                          MakeDoubleAccessor(&MltcpJobConfig::m_cap),
                          MakeDoubleChecker<double>(0.0, MLTCP_MAX_CAP))
            .AddAttribute("IdleGap", "a silence longer than this ends the job's iteration",
                          TimeValue(MilliSeconds(5)),
                          MakeTimeAccessor(&MltcpJobConfig::m_gap), MakeTimeChecker());
    return tid;
  }
  void Install() const {
    MltcpJobs::Configure(m_job, m_node, m_budget, m_slope, m_intercept, m_cap,
                         static_cast<uint64_t>(m_gap.GetNanoSeconds()));
  }

 private:
  uint32_t m_job{1};
  uint32_t m_node{0};
  uint64_t m_budget{0};
  double m_slope{1.0};
  double m_intercept{1.0};
  double m_cap{0.0};
  Time m_gap{MilliSeconds(5)};
};

// The per-flow part every MLTCP class shares: which job, and the carried fraction.
class MltcpFlow {
 public:
  uint32_t m_job{0};
  uint32_t m_node{0};
  uint64_t m_frac{0};

  mltcp::IterationTracker* Tracker() {
    return m_job && MltcpJobs::Has(m_job, m_node) ? &MltcpJobs::Get(m_job, m_node) : nullptr;
  }
  static uint64_t NowNs() { return static_cast<uint64_t>(Simulator::Now().GetNanoSeconds()); }
  void Acked(Ptr<TcpSocketState> tcb, uint32_t segments) {
    if (auto* t = Tracker()) t->OnAck(uint64_t(segments) * tcb->m_segmentSize, NowNs());
  }
  void Event(Ptr<TcpSocketState> tcb, TcpSocketState::TcpCAEvent_t event) {
    if (event != TcpSocketState::CA_EVENT_TX_START) return;
    if (auto* t = Tracker()) t->OnTxStart(NowNs(), tcb->m_bytesInFlight.Get());
  }
  // True while the job's F speeds this flow up (F > 1).
  bool Faster() {
    auto* t = Tracker();
    return t && t->f_fp > mltcp::kFpOne;
  }
  uint32_t Scaled(uint32_t segments) {
    auto* t = Tracker();
    if (!t) return segments;
    return static_cast<uint32_t>(mltcp::ScaleAcked(segments, t->f_fp, &m_frac));
  }
};

// Everything the MLTCP classes share around an ns-3 algorithm `Base`: the job tag
// (attributes JobId/NodeId), feeding ACKs and send restarts to the job's tracker, and
// copying that state when ns-3 forks the algorithm for an accepted socket.  Only the
// window-growth hook differs per algorithm, in the small classes below.
template <class Base>
class MltcpOps : public Base {
 public:
  MltcpOps() = default;
  MltcpOps(const MltcpOps& o) : Base(o), m_flow(o.m_flow) {}
  void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segments, const Time& rtt) override {
    m_flow.Acked(tcb, segments);
    Base::PktsAcked(tcb, segments, rtt);
  }
  void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
    m_flow.Event(tcb, event);
    Base::CwndEvent(tcb, event);
  }
  void SetJob(uint32_t v) { m_flow.m_job = v; }
  uint32_t GetJob() const { return m_flow.m_job; }
  void SetNode(uint32_t v) { m_flow.m_node = v; }
  uint32_t GetNode() const { return m_flow.m_node; }

  // The TypeId of MLTCP class `Cls` (named `name`, e.g. "ns3::MltcpReno").
  template <class Cls>
  static TypeId Register(const char* name) {
    return TypeId(name)
        .template SetParent<Base>()
        .SetGroupName("Internet")
        .template AddConstructor<Cls>()
        .AddAttribute("JobId", "MLTCP job of this flow (0: none, the standard algorithm)",
                      UintegerValue(0),
                      MakeUintegerAccessor(&MltcpOps::SetJob, &MltcpOps::GetJob),
                      MakeUintegerChecker<uint32_t>())
        .AddAttribute("NodeId", "host whose per-job counter this flow feeds", UintegerValue(0),
                      MakeUintegerAccessor(&MltcpOps::SetNode, &MltcpOps::GetNode),
                      MakeUintegerChecker<uint32_t>());
  }

 protected:
  MltcpFlow m_flow;
};

// Reno and DCTCP: the segments that additive increase sees are scaled, after slow
// start took its part (as the kernel's mltcp_reno scales tcp_cong_avoid_ai's `acked`).
class MltcpReno : public MltcpOps<TcpLinuxReno> {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = Register<MltcpReno>("ns3::MltcpReno");
    return tid;
  }
  std::string GetName() const override { return "MltcpReno"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpReno>(this); }

 protected:
  void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    TcpLinuxReno::CongestionAvoidance(tcb, m_flow.Scaled(segments));
  }
};

class MltcpDctcp : public MltcpOps<TcpDctcp> {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = Register<MltcpDctcp>("ns3::MltcpDctcp");
    return tid;
  }
  std::string GetName() const override { return "MltcpDctcp"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpDctcp>(this); }

 protected:
  void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    TcpDctcp::CongestionAvoidance(tcb, m_flow.Scaled(segments));
  }
};

// CUBIC has no separate congestion-avoidance hook: scale what IncreaseWindow gets
// when the window is at or above ssthresh.
class MltcpCubic : public MltcpOps<TcpCubic> {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = Register<MltcpCubic>("ns3::MltcpCubic");
    return tid;
  }
  std::string GetName() const override { return "MltcpCubic"; }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpCubic>(this); }
  void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segments) override {
    if (tcb->m_cWnd < tcb->m_ssThresh) {
      TcpCubic::IncreaseWindow(tcb, segments);
      return;
    }
    const bool faster = m_flow.Faster();
    const uint32_t before = tcb->m_cWnd;
    TcpCubic::IncreaseWindow(tcb, m_flow.Scaled(segments));
    if (faster) CapGrowth(tcb, before, segments);
  }

 private:
  // The kernel CUBIC's ceiling, as kernel/mltcp_cubic.bpf.c keeps it: one half-segment
  // of growth per segment acked, unused credit carried up to one segment.
  void CapGrowth(Ptr<TcpSocketState> tcb, uint32_t before, uint32_t segments) {
    const uint32_t mss = tcb->m_segmentSize;
    uint64_t halves = uint64_t(m_growthHalves) + segments;
    const uint64_t allowed = before + (halves / 2) * mss;
    if (tcb->m_cWnd > allowed) tcb->m_cWnd = static_cast<uint32_t>(allowed);
    if (tcb->m_cWnd > before) halves -= 2 * ((tcb->m_cWnd - before + mss - 1) / mss);
    m_growthHalves = static_cast<uint32_t>(halves > 2 ? 2 : halves);
  }
  uint32_t m_growthHalves{0};
};

}  // namespace ns3
