// The copy-through-socket path that the shared-memory design replaces: the
// payload travels in ZMQ frames over ipc:// to a server that copies it into
// its own pre-faulted memory (store) and sends it back (retrieve). The server
// here is bench-side and minimal: the figure is a lower bound on what any
// socket-based KV server pays.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "paths.h"
#include "phased_workers.h"

namespace lmcache::bench {
namespace {

struct Extent {
  std::uint64_t offset;
  std::uint64_t size;
};

// [uid, "store", key, chunk...] -> [uid, "ok"];  [uid, "load", key] -> [uid, chunk...];
// [uid, "reset"] -> [uid, "ok"]: forget everything (the arena is reused).
[[noreturn]] void ServeSockets(const std::string& url, std::uint64_t arena_bytes) {
  std::vector<std::byte> arena(arena_bytes, std::byte{1});  // touched: pre-faulted
  std::map<std::string, std::vector<Extent>> index;
  std::uint64_t used = 0;
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(url);
  while (true) {
    zmq::multipart_t request(router);
    if (request.size() < 3) continue;
    zmq::multipart_t reply;
    reply.add(request.pop());  // identity
    reply.add(request.pop());  // uid
    const std::string op = request.popstr();
    if (op == "store") {
      const std::string key = request.popstr();
      std::vector<Extent>& extents = index[key];
      while (!request.empty()) {
        zmq::message_t chunk = request.pop();
        if (used + chunk.size() > arena.size()) _exit(3);
        std::memcpy(arena.data() + used, chunk.data(), chunk.size());
        extents.push_back({used, chunk.size()});
        used += chunk.size();
      }
      reply.addstr("ok");
    } else if (op == "load") {
      for (const Extent& e : index[request.popstr()]) {
        reply.addmem(arena.data() + e.offset, e.size);  // copies out of the arena
      }
    } else if (op == "reset") {
      index.clear();
      used = 0;
      reply.addstr("ok");
    } else if (op == "quit") {
      _exit(0);
    }
    reply.send(router);
  }
}

struct SocketWorker {
  std::unique_ptr<zmq::context_t> context;
  std::unique_ptr<zmq::socket_t> socket;
  PromptBuffers buffers;
  std::uint64_t uid = 0;
};

Result<zmq::multipart_t> Roundtrip(zmq::socket_t& socket, zmq::multipart_t request) {
  request.send(socket);
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(60'000)) != 1) {
    return Status(ErrorCode::kTimeout, "the socket server did not answer");
  }
  return zmq::multipart_t(socket);
}

}  // namespace

Result<std::unique_ptr<BenchPath>> StartSocketPath(const BenchOptions& o) {
  const std::string url = "ipc://" + (std::filesystem::temp_directory_path() /
                                      ("lmcache_bench_socket_" + std::to_string(getpid())))
                                         .string();
  const pid_t server = fork();
  if (server < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (server == 0) ServeSockets(url, o.bytes_per_round() + (1u << 20));
  auto stop_server = [server] {
    kill(server, SIGKILL);
    waitpid(server, nullptr, 0);
  };

  auto state = std::make_shared<SocketWorker>();
  // The server forgets everything between rounds, so a key only names (worker, prompt).
  auto key_of = [&o](int w, int p) { return std::to_string(w * o.prompts_per_worker + p); };
  auto setup = [&o, &url, state](int w) -> Status {
    state->context = std::make_unique<zmq::context_t>(1);
    state->socket = std::make_unique<zmq::socket_t>(*state->context, zmq::socket_type::dealer);
    state->socket->set(zmq::sockopt::linger, 0);
    state->socket->connect(url);
    state->buffers = MakePromptBuffers(o, w);
    return Status::Ok();
  };
  auto store = [&o, state, key_of](int w) -> Status {
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      zmq::multipart_t request;
      request.addstr(std::to_string(state->uid++));
      request.addstr("store");
      request.addstr(key_of(w, p));
      for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
        request.addmem(state->buffers.data[p].data() + c * o.object_bytes(), o.object_bytes());
      }
      LMC_RETURN_IF_ERROR(Roundtrip(*state->socket, std::move(request)).status());
    }
    return Status::Ok();
  };
  auto retrieve = [&o, state, key_of](int w) -> Status {
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      zmq::multipart_t request;
      request.addstr(std::to_string(state->uid++));
      request.addstr("load");
      request.addstr(key_of(w, p));
      LMC_ASSIGN_OR_RETURN(zmq::multipart_t reply, Roundtrip(*state->socket, std::move(request)));
      reply.pop();  // uid
      if (reply.size() != o.chunks_per_prompt()) return Internal("socket server lost chunks");
      for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
        zmq::message_t chunk = reply.pop();
        std::memcpy(state->buffers.out[p].data() + c * o.object_bytes(), chunk.data(),
                    chunk.size());
      }
    }
    return Status::Ok();
  };
  auto verify = [state](int) { return state->buffers.Verify(); };
  auto workers = PhasedWorkers::Start(o.workers, setup, {store, retrieve, verify});
  if (!workers.ok()) {
    stop_server();
    return workers.status();
  }

  struct Admin {
    zmq::context_t context{1};
    zmq::socket_t socket{context, zmq::socket_type::dealer};
  };
  auto admin = std::make_shared<Admin>();
  admin->socket.set(zmq::sockopt::linger, 0);
  admin->socket.connect(url);
  auto reset = [admin] {
    zmq::multipart_t request;
    request.addstr("admin");
    request.addstr("reset");
    request.addstr("");
    return Roundtrip(admin->socket, std::move(request)).status();
  };
  auto stop = [admin, stop_server, url]() mutable {
    admin.reset();
    stop_server();
    std::filesystem::remove(url.substr(6));
  };
  return std::unique_ptr<BenchPath>(
      std::make_unique<PhasedPath>(o, std::move(workers).value(), reset, stop));
}

}  // namespace lmcache::bench
