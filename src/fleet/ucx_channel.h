// UcxChannel: this server's UCX data channel (issue 42, section 2): how a
// peer's L1 objects reach ours, and ours reach a peer's.
//
// Reads are owner-mediated: the requester sends a read request (an active
// message: offset, size, the owner's lookup task it reads through, an id of
// 128 random bits, and a MAC made with the fleet's data key: the wire form
// is fleet/ucx_wire.h); the owner checks the MAC
// (constant time), that the range lies inside its pool and that the task
// holds that object locked now (the ServeGuard: a read through a lock the
// owner released, reaped or held in its previous life is refused; the
// check is made when the request arrives, and the lock is not held until
// the reply's bytes are sent: docs/architecture.md says what can release
// it meanwhile), and answers with the bytes as the active message's data, which
// UCX moves by rendezvous when large (a zero-copy RDMA read where a NIC has
// verbs; over TCP or shared memory a copy by the transport); the requester
// lands them straight in its destination slot (ucp_am_recv_data_nbx). The
// reply is accepted only when its header's MAC holds under the data key,
// its id names a read in flight, and it came on the endpoint that read's
// request went to; its bytes count as landed only when they match the
// owner's keyed digest of them (unless the channel was made without
// digests: docs/security.md says what that gives up). A reply failing any
// check is counted (forged, foreign, corrupt) and writes no slot that is
// then reported landed. Why
// not one-sided gets with a remote key: with UCX 1.13's TCP and
// shared-memory transports a get is served for any address of the owner's
// process, whatever region the key names, and its software get aborts the
// owner when the requester's endpoint goes mid-read (docs/architecture.md,
// "Where the fleet goes", says how it was measured). So the contexts here
// enable active messages only (UCP_FEATURE_AM): no UCX get is ever served.
//
// What a peer needs to reach us is `Descriptor()`: our worker's address and
// our pool's size. It crosses only the fleet endpoint (the fleet key
// proved). A peer's descriptor and every message of a peer are untrusted
// input: lengths and ranges are checked, unknown request ids are dropped.
//
// Reads never block their caller: `Read` queues a batch and returns; the
// progress thread sends the requests and calls `done` once every read of
// the batch has landed or failed. A batch past its deadline fails; a reply
// that arrives later is dropped, and a read whose bytes were already
// landing is waited for, so a destination slot is never written after
// `done` (only a stopping channel gives up on a landing read, after 10 s).
// A peer whose endpoint failed (UCX's peer error handling) is not read again
// until connected anew.
//
// Thread-safety: Connect, Disconnect, Read and Stats may be called from any
// thread. Every UCX call runs on the channel's progress thread (the worker
// is single-threaded); callers hand it commands through a queue and an
// eventfd. `done` callbacks run on the progress thread and must not block.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "fleet/fleet_stats.h"
#include "fleet/ucx_descriptor.h"
#include "fleet/ucx_wire.h"
#include "lmcache/status.h"

namespace lmcache::fleet {

// Makes UCX's TCP transport send by copy, never zero-copy (UCX 1.13.1
// aborts the process when a zero-copy send fails: ucx_channel.cc says
// where), unless the environment already says otherwise (UCX_TCP_PUT_ENABLE),
// in copied fragments of 64 KiB (UCX_TCP_TX_SEG_SIZE, unless either segment
// size is set). It sets environment variables, which UCX reads when a channel starts:
// call it before other threads run (main does, first thing); Create calls
// it too where it was not called, for programs that make channels directly.
void PreferCopyingTcp();

// One read: `size` bytes at `remote_offset` of the peer's pool into
// `local_offset` of ours, through the lock the peer's lookup task `task`
// holds on the object there (the owner serves nothing else).
struct UcxRead {
  std::uint64_t remote_offset = 0;
  std::uint64_t local_offset = 0;
  std::uint64_t size = 0;
  std::int64_t task = 0;
};

// The owner's check of each read a peer asks for: whether lookup task
// `task` holds locked now the object at exactly [offset, offset + size) of
// our pool (fleet::PeerTasks::Holds in the server).
using ServeGuard = std::function<bool(std::int64_t task, std::uint64_t offset, std::uint64_t size)>;


// How a channel is made beyond its pool and key.
struct UcxChannelOptions {
  // Ask owners for a keyed digest of every reply's bytes and check it
  // before a read counts as landed (--p2p-verify-bytes).
  bool verify_bytes = true;
  // UCX's NET_DEVICES: the network devices the channel uses, and so the
  // only interfaces its TCP transport listens on ("" = UCX's choice: all).
  std::string net_devices;
};

using PeerHandle = std::uint64_t;

class UcxChannel {
 public:
  // Registers [pool, pool + size) with UCX and starts the progress thread.
  // `clock` (the steady clock in the server) measures deadlines; it must
  // outlive the channel. Requests made and accepted carry MACs under `key`.
  static Result<std::unique_ptr<UcxChannel>> Create(std::byte* pool, std::size_t size,
                                                    const Clock* clock, const FleetDataKey& key,
                                                    UcxChannelOptions options = {});
  ~UcxChannel();  // fails every queued read, closes every endpoint, joins the thread
  UcxChannel(const UcxChannel&) = delete;
  UcxChannel& operator=(const UcxChannel&) = delete;

  const UcxDescriptor& Descriptor() const { return descriptor_; }

  // The check of every read peers ask of us; until one is set, every read
  // is refused. Takes effect before any read that arrives after it returns.
  void SetServeGuard(ServeGuard guard);

  // Opens an endpoint to the peer `descriptor` names; blocks until the
  // progress thread has done it. A handle is never reused.
  Result<PeerHandle> Connect(const UcxDescriptor& descriptor);
  // Ends the endpoint: its reads in flight fail, then their batches end.
  void Disconnect(PeerHandle peer);
  // Queues one batch of reads from `peer`; `done` gets Ok once every byte
  // arrived, or the error that ended the batch. A read outside either pool
  // (as the peer's descriptor says) fails the whole batch before any request
  // is sent.
  void Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
            std::function<void(Status)> done);
  // As Read, and `done` also gets, per read, whether every byte of it
  // arrived: a batch that failed (a peer that died, a deadline) may still
  // have landed some of its reads whole, and those bytes are good.
  using ReadsDone = std::function<void(Status, std::vector<bool> landed)>;
  void ReadEach(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                ReadsDone done);

  // Ends every batch now, as at its deadline, and every later one at once
  // (at shutdown: nothing waits out a hung peer's deadline). A read whose
  // bytes are landing is still waited for: no slot is written after its
  // batch's `done`.
  void EndReads();

  UcxChannelStats Stats() const;

 private:
  struct Impl;
  explicit UcxChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  UcxDescriptor descriptor_;
};

}  // namespace lmcache::fleet
