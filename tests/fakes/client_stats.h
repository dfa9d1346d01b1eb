// Helpers for tests that drive a real server through the client library:
// one field of its `stats` reply, and a client connected and registered as
// an engine-driven worker.
// Thread-safety: as the Client they are given (one caller per client).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "common/msgpack_codec.h"
#include "common/msgpack_tree.h"
#include "lmcache/client.h"

namespace lmcache::testing {

// A field of the server's `stats` reply, by path ("instances", "registered");
// a failed call or a missing field fails the test and answers ~0.
inline std::uint64_t StatsField(client::Client& client,
                                std::initializer_list<std::string_view> path) {
  auto stats = client.Call("stats", {});
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (!stats.ok()) return ~0ull;
  auto handle = std::move(msgpk::Parse(*stats, "stats")).value();
  const msgpack::object* field = &handle.get();
  for (const std::string_view name : path) {
    auto map = msgpk::MapReader::Make(*field, "stats");
    EXPECT_TRUE(map.ok() && map->Field(name) != nullptr) << "no stats field " << name;
    if (!map.ok() || map->Field(name) == nullptr) return ~0ull;
    field = map->Field(name);
  }
  return field->via.u64;
}

// A client of `url`, registered as engine-driven worker `instance` of
// `model` with the given layout; nullptr (and a failed test) if it cannot be.
inline std::unique_ptr<client::Client> ConnectWorker(
    const std::string& url, std::int64_t instance, const std::string& model, std::int64_t layers,
    std::int64_t hidden, std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  client::ClientOptions options;
  options.url = url;
  options.request_timeout = timeout;
  auto connected = client::Client::Connect(options);
  EXPECT_TRUE(connected.ok()) << connected.status().ToString();
  if (!connected.ok()) return nullptr;
  client::EngineContext context;
  context.instance_id = instance;
  context.model_name = model;
  context.num_layers = layers;
  context.hidden_dim_size = hidden;
  auto registration = (*connected)->Register(context);
  EXPECT_TRUE(registration.ok()) << registration.status().ToString();
  return std::move(connected).value();
}

}  // namespace lmcache::testing
