// Round-trip latencies: the server's ping, a bare ZMQ ROUTER echo of the same
// frames (the transport's floor), and lookups of a long, fully cached prompt.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "bench.h"
#include "common/msgpack_codec.h"
#include "lmcache/client.h"
#include "lmcache/protocol.h"

namespace lmcache::bench {
namespace {

using SteadyTime = std::chrono::steady_clock;

double Micros(SteadyTime::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

[[noreturn]] void ServeEcho(const std::string& url) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(url);
  while (true) {
    zmq::multipart_t message(router);
    message.send(router);  // identity, uid, op, payload: all back as they came
  }
}

Result<double> PingP50(const std::string& url, int samples) {
  client::ClientOptions options;
  options.url = url;
  LMC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  LMC_RETURN_IF_ERROR(client->Ping());  // connected before timing
  std::vector<double> times;
  for (int i = 0; i < samples; ++i) {
    const auto start = SteadyTime::now();
    LMC_RETURN_IF_ERROR(client->Ping());
    times.push_back(Micros(SteadyTime::now() - start));
  }
  return Median(times);
}

Result<double> EchoP50(int samples) {
  const std::string url = "ipc://" + (std::filesystem::temp_directory_path() /
                                      ("lmcache_bench_echo_" + std::to_string(getpid())))
                                         .string();
  const pid_t server = fork();
  if (server < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (server == 0) ServeEcho(url);
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(url);
  // The frames of a ping: uid, operation id 22, nil instance id.
  const std::string op = mp::Encoder().Int(static_cast<std::int64_t>(Op::kPing)).Take();
  const std::string nil = mp::Encoder().Nil().Take();
  std::vector<double> times;
  Status status;
  for (int i = -10; i < samples && status.ok(); ++i) {  // 10 warm-up round trips
    const auto start = SteadyTime::now();
    zmq::multipart_t request;
    request.addstr(mp::Encoder().Int(i).Take());
    request.addstr(op);
    request.addstr(nil);
    request.send(dealer);
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(10'000)) != 1) {
      status = Status(ErrorCode::kTimeout, "echo server did not answer");
      break;
    }
    zmq::multipart_t reply(dealer);
    if (i >= 0) times.push_back(Micros(SteadyTime::now() - start));
  }
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  std::filesystem::remove(url.substr(6));
  LMC_RETURN_IF_ERROR(status);
  return Median(times);
}

// Lookup + wait_prefetch_status of a `tokens` prompt whose chunks are all cached:
// the server hashes every chunk and read-locks every object.
Result<double> LookupP50(const BenchOptions& o, const std::string& url, int samples) {
  client::ClientOptions options;
  options.url = url;
  LMC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  client::EngineContext context;
  context.instance_id = 8'000'000;
  context.model_name = "bench-lookup";
  context.num_layers = 1;
  context.hidden_dim_size = 8;  // 8 KiB objects: the chunks of a long prompt fit any pool
  LMC_RETURN_IF_ERROR(client->Register(context).status());
  client::KeySpec key;
  key.model_name = context.model_name;
  key.token_ids = PromptTokens(o.lookup_tokens, 424242);
  const std::uint64_t chunks = o.lookup_tokens / o.chunk_size;
  key.end = static_cast<std::int64_t>(chunks * o.chunk_size);
  key.request_id = "lookup-store";
  std::vector<std::byte> zeros(client->ObjectBytes());
  std::vector<std::span<const std::byte>> spans(chunks, zeros);
  LMC_ASSIGN_OR_RETURN(const client::StoreResult stored, client->Store(key, spans));
  if (stored.stored + stored.already_cached != chunks) return Internal("lookup prompt not stored");
  std::vector<double> times;
  for (int i = 0; i < samples; ++i) {
    key.request_id = "lookup-" + std::to_string(i);  // a new session: every chunk is hashed
    const auto start = SteadyTime::now();
    LMC_ASSIGN_OR_RETURN(const std::size_t hits, client->Lookup(key));
    times.push_back(Micros(SteadyTime::now() - start));
    if (hits != chunks) return Internal("lookup hit " + std::to_string(hits) + " chunks");
    LMC_RETURN_IF_ERROR(client->FreeLookupLocks(key));
    LMC_RETURN_IF_ERROR(client->EndSession(key.request_id));
  }
  (void)client->Unregister();
  return Median(times);
}

}  // namespace

Result<Latencies> MeasureLatencies(const BenchOptions& o, const std::string& url) {
  Latencies result;
  LMC_ASSIGN_OR_RETURN(result.ping_p50_us, PingP50(url, o.latency_samples));
  LMC_ASSIGN_OR_RETURN(result.zmq_echo_p50_us, EchoP50(o.latency_samples));
  LMC_ASSIGN_OR_RETURN(result.lookup_p50_us,
                       LookupP50(o, url, std::max(5, o.latency_samples / 20)));
  return result;
}

}  // namespace lmcache::bench
