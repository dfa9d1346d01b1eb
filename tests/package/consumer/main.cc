// A C++ engine using the installed client: registers, stores one prompt of
// distinct bytes, looks it up and retrieves it into fresh buffers, and checks
// every byte. Usage: consumer URL. Prints "consumer: OK" and exits 0 on success.
#include <lmcache/client.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int Fail(const char* step, const lmcache::Status& status) {
  std::fprintf(stderr, "consumer: %s: %s\n", step, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer URL\n");
    return 2;
  }
  lmcache::client::ClientOptions options;
  options.url = argv[1];
  auto client = lmcache::client::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  lmcache::client::EngineContext context;
  context.instance_id = 4242;
  context.model_name = "consumer-model";
  context.num_layers = 2;
  context.hidden_dim_size = 64;
  auto registered = (*client)->Register(context);
  if (!registered.ok()) return Fail("register", registered.status());

  lmcache::client::KeySpec key;
  key.model_name = context.model_name;
  for (std::uint32_t t = 0; t < 512; ++t) key.token_ids.push_back(t * 7 + 3);
  key.end = 512;
  key.request_id = "consumer";
  const std::size_t bytes = (*client)->ObjectBytes();
  std::vector<std::vector<std::byte>> chunks(2, std::vector<std::byte>(bytes));
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    for (std::size_t i = 0; i < bytes; ++i) chunks[c][i] = std::byte(static_cast<unsigned char>(i * 31 + c));
  }
  std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
  auto stored = (*client)->Store(key, in);
  if (!stored.ok()) return Fail("store", stored.status());
  auto hits = (*client)->Lookup(key);
  if (!hits.ok()) return Fail("lookup", hits.status());
  if (*hits != 2) {
    std::fprintf(stderr, "consumer: lookup found %zu of 2 chunks\n", *hits);
    return 1;
  }
  std::vector<std::vector<std::byte>> back(2, std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> out(back.begin(), back.end());
  if (auto s = (*client)->Retrieve(key, out); !s.ok()) return Fail("retrieve", s);
  if (back != chunks) {
    std::fprintf(stderr, "consumer: retrieved bytes differ\n");
    return 1;
  }
  (void)(*client)->EndSession(key.request_id);
  (void)(*client)->Unregister();
  std::printf("consumer: OK\n");
  return 0;
}
