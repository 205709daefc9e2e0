// Simulation-side helpers for the ns-3 backend, in C++ because they run per packet or
// per event and a Python callback there would dominate the run time:
//
// * TrainingJob: one synthetic training job as on the netns testbed: per iteration,
//   compute (a timer), then every worker sends its share to its ring successor over
//   one TCP connection; the iteration ends when every successor has received its
//   share (barrier), and the next compute starts.  Connections are created with the
//   scheme's congestion class, tagged with the job and the sending host for MLTCP.
// * LinkSampler: every period, each sampled queue disc's cumulative sent bytes,
//   backlog, drops and ECN marks (the common trace's link samples).
#pragma once
#include "ns3/inet-socket-address.h"
#include "ns3/ipv4-address.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/queue-disc.h"
#include "ns3/simulator.h"
#include "ns3/socket.h"
#include "ns3/tcp-socket-base.h"
#include "ns3/tcp-socket-factory.h"

#include "mltcp_tcp.h"

#include <string>
#include <vector>

namespace ns3 {

class TrainingJob : public SimpleRefCount<TrainingJob> {
 public:
  // Setup (before Start): the workers in ring order and what each sends per iteration.
  std::vector<Ptr<Node>> nodes;
  std::vector<Ipv4Address> addrs;
  uint16_t port = 9000;
  uint64_t share_bytes = 0;          // per worker per iteration
  uint32_t iterations = 1;
  double compute_s = 0.1;
  std::vector<double> jitter_s;      // added to iteration k's compute
  std::string cc_type = "ns3::TcpCubic";
  uint32_t job_id = 0;               // MLTCP tracker id; 0 = standard flows
  uint32_t segment_size = 1448;

  // Results: seconds since the simulation start.
  std::vector<double> rec_start, rec_comm_start, rec_comm_end;
  bool done = false;

  // Connections open at time 0 (inside the run: queue discs initialise when the
  // simulation starts, and a SYN sent before that would find none); the first
  // iteration starts at at_s.
  void Start(double at_s) {
    Simulator::Schedule(Seconds(0), &TrainingJob::Open, this);
    Simulator::Schedule(Seconds(at_s), &TrainingJob::BeginIteration, this);
  }

 private:
  void Open() {
    const std::size_t n = nodes.size();
    m_received.assign(n, 0);
    m_left.assign(n, 0);
    m_accepted.assign(n, nullptr);
    for (std::size_t i = 0; i < n; ++i) {
      Ptr<Socket> srv = Socket::CreateSocket(nodes[i], TcpSocketFactory::GetTypeId());
      srv->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
      srv->Listen();
      srv->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                             MakeBoundCallback(&TrainingJob::Accepted, this, i));
      m_listeners.push_back(srv);
    }
    for (std::size_t i = 0; i < n; ++i) {
      Ptr<Socket> s = Socket::CreateSocket(nodes[i], TcpSocketFactory::GetTypeId());
      Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(s);
      ObjectFactory f;
      f.SetTypeId(cc_type);
      Ptr<TcpCongestionOps> cc = f.Create<TcpCongestionOps>();
      TypeId::AttributeInformation info;
      if (job_id && cc->GetInstanceTypeId().LookupAttributeByName("JobId", &info)) {
        cc->SetAttribute("JobId", UintegerValue(job_id));
        cc->SetAttribute("NodeId", UintegerValue(nodes[i]->GetId()));
      }
      tcp->SetCongestionControlAlgorithm(cc);
      s->SetAttribute("SndBufSize", UintegerValue(share_bytes + (1u << 20)));
      s->Bind();
      s->Connect(InetSocketAddress(addrs[(i + 1) % n], port));
      s->SetSendCallback(MakeBoundCallback(&TrainingJob::CanSend, this, i));
      m_senders.push_back(s);
    }
  }

  std::vector<Ptr<Socket>> m_listeners, m_senders, m_accepted;
  std::vector<uint64_t> m_received, m_left;
  uint32_t m_iter = 0;

  static void Accepted(TrainingJob* job, std::size_t i, Ptr<Socket> s, const Address&) {
    // Worker i's listener accepts its predecessor's connection.
    job->m_accepted[i] = s;
    s->SetRecvCallback(MakeBoundCallback(&TrainingJob::Received, job, i));
  }

  void BeginIteration() {
    double now = Simulator::Now().GetSeconds();
    rec_start.push_back(now);
    double compute = compute_s + (m_iter < jitter_s.size() ? jitter_s[m_iter] : 0.0);
    Simulator::Schedule(Seconds(compute > 0 ? compute : 0.0), &TrainingJob::BeginComm, this);
  }

  void BeginComm() {
    rec_comm_start.push_back(Simulator::Now().GetSeconds());
    for (std::size_t i = 0; i < m_senders.size(); ++i) {
      m_left[i] = share_bytes;
      Push(i);
    }
  }

  static void CanSend(TrainingJob* job, std::size_t i, Ptr<Socket>, uint32_t) { job->Push(i); }

  void Push(std::size_t i) {
    Ptr<Socket> s = m_senders[i];
    while (m_left[i] > 0) {
      uint32_t room = s->GetTxAvailable();
      if (room == 0) return;
      uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>({m_left[i], room, 1u << 20}));
      int sent = s->Send(Create<Packet>(chunk));
      if (sent <= 0) return;
      m_left[i] -= static_cast<uint64_t>(sent);
    }
  }

  static void Received(TrainingJob* job, std::size_t i, Ptr<Socket> s) {
    Ptr<Packet> p;
    while ((p = s->Recv())) job->m_received[i] += p->GetSize();
    job->CheckBarrier();
  }

  void CheckBarrier() {
    if (done || rec_comm_start.size() <= m_iter) return;
    const uint64_t want = uint64_t(m_iter + 1) * share_bytes;
    for (uint64_t got : m_received) {
      if (got < want) return;
    }
    rec_comm_end.push_back(Simulator::Now().GetSeconds());
    ++m_iter;
    if (m_iter >= iterations) {
      done = true;
      return;
    }
    BeginIteration();
  }
};

class LinkSampler : public SimpleRefCount<LinkSampler> {
 public:
  std::vector<Ptr<QueueDisc>> queues;
  double period_s = 0.01;
  // Per sample: time, then per queue (sent bytes, backlog bytes, drops, marks).
  std::vector<double> times;
  std::vector<std::vector<uint64_t>> sent, backlog, drops, marks;

  void Start() {
    sent.assign(queues.size(), {});
    backlog.assign(queues.size(), {});
    drops.assign(queues.size(), {});
    marks.assign(queues.size(), {});
    Simulator::Schedule(Seconds(period_s), &LinkSampler::Sample, this);
  }
  bool stop = false;

 private:
  void Sample() {
    times.push_back(Simulator::Now().GetSeconds());
    for (std::size_t q = 0; q < queues.size(); ++q) {
      const QueueDisc::Stats& st = queues[q]->GetStats();
      sent[q].push_back(st.nTotalSentBytes);
      backlog[q].push_back(queues[q]->GetNBytes());
      drops[q].push_back(st.nTotalDroppedPackets);
      marks[q].push_back(st.nTotalMarkedPackets);
    }
    if (!stop) Simulator::Schedule(Seconds(period_s), &LinkSampler::Sample, this);
  }
};

// Stops the simulation once every job is done (checked every period).
class DoneWatcher : public SimpleRefCount<DoneWatcher> {
 public:
  std::vector<Ptr<TrainingJob>> jobs;
  Ptr<LinkSampler> sampler;
  double period_s = 0.01;
  void Start() { Simulator::Schedule(Seconds(period_s), &DoneWatcher::Check, this); }

 private:
  void Check() {
    for (auto& j : jobs) {
      if (!j->done) {
        Simulator::Schedule(Seconds(period_s), &DoneWatcher::Check, this);
        return;
      }
    }
    if (sampler) sampler->stop = true;
    Simulator::Stop();
  }
};

}  // namespace ns3
