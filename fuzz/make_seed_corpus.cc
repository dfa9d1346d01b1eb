// Writes the fuzzers' seed corpora: real frames of every operation (a
// registration, keys of stores, lookups and retrieves, status queries,
// management calls) in request_fuzzer's input format, and the same payload
// frames alone for wire_codec_fuzzer.
//
//   make_seed_corpus <request corpus dir> <wire codec corpus dir>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "fleet/chunk_feed_codec.h"
#include "fleet/peer_info.h"
#include "fleet/ucx_channel.h"
#include "fleet/ucx_wire.h"
#include "fuzz_input.h"
#include "protocol/p2p_codec.h"
#include "protocol/wire_codec.h"
#include "journal_input.h"
#include "restart/handover_codec.h"
#include "restart/pool_recovery.h"
#include "tier/object_format.h"
#include "server/service.h"
#include "store/l1_cache.h"

namespace {

using namespace lmcache;
using msgpk::Encoder;

std::string Int(std::int64_t v) { return Encoder().Int(v).Take(); }
std::string Str(std::string_view v) { return Encoder().Str(v).Take(); }

IpcKey Key(bool worker, std::int64_t end) {
  IpcKey key;
  key.model_name = "fuzz-model";
  key.world_size = 1;
  if (!worker) key.worker_id.reset();
  for (std::uint32_t t = 0; t < 64; ++t) key.token_ids.push_back(1000 + t * 7);
  key.end = end;
  key.request_id = "fuzz-request";
  return key;
}

void Write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seed_corpus <corpus dir> (writes <fuzzer>-seed/ under it)\n";
    return 2;
  }
  const std::filesystem::path root = argv[1];
  const std::filesystem::path requests = root / "request_fuzzer-seed";
  const std::filesystem::path frames = root / "wire_codec_fuzzer-seed";
  const std::filesystem::path objects = root / "l2_object_fuzzer-seed";
  const std::filesystem::path replies = root / "resp_reply_fuzzer-seed";
  const std::filesystem::path handover = root / "handover_fuzzer-seed";
  const std::filesystem::path journal = root / "journal_fuzzer-seed";
  const std::filesystem::path handshakes = root / "peer_handshake_fuzzer-seed";
  const std::filesystem::path channel_replies = root / "ucx_reply_fuzzer-seed";
  const std::filesystem::path s3_replies = root / "s3_reply_fuzzer-seed";
  for (const auto& dir : {requests, frames, objects, replies, handover, journal, handshakes,
                          channel_replies, s3_replies}) {
    std::filesystem::create_directories(dir);
  }

  // The op table as the fuzzer's service builds it (row indices by name).
  store::L1Config l1;
  l1.shm_name = "lmcache_l1_pool_seed_" + std::to_string(getpid());
  l1.size_bytes = 4u << 20;
  l1.prefault_threads = 1;
  l1.background_prefault = false;
  auto cache = std::move(store::L1Cache::Create(l1, &SteadyClock::Instance())).value();
  server::ServiceConfig config;
  config.chunk_sizes = store::ChunkSizes(16);
  server::Service service(cache.get(), &SteadyClock::Instance(), config);
  std::map<std::string, std::uint8_t> index;
  for (const server::OpRow& row : service.ops().rows()) {
    index[std::string(row.spec.name)] = static_cast<std::uint8_t>(row.index);
  }

  EngineContext engine;
  engine.instance_id = 1;
  engine.model_name = "fuzz-model";
  engine.num_layers = 1;
  engine.hidden_dim_size = 8;
  const std::string key32 = protocol::EncodeIpcKey(Key(true, 32));
  const std::string lookup = protocol::EncodeIpcKey(Key(false, 64));
  IpcKey tagged_key = Key(true, 32);  // request tags: lmcache.tag.* in request_configs
  tagged_key.tags = {{"tenant", "a"}, {"application_version", "v2"}};
  const std::string tagged = protocol::EncodeIpcKey(tagged_key);
  IpcKey hinted_key = Key(false, 64);  // the load controls in request_configs
  hinted_key.engine_computed_tokens = 40;
  const std::string hinted = protocol::EncodeIpcKey(hinted_key);
  hinted_key.skip_load = true;
  const std::string skipped = protocol::EncodeIpcKey(hinted_key);
  const std::vector<std::pair<std::string, std::vector<std::string>>> seeds = {
      {"register_kv_cache_engine_driven_context", {protocol::EncodeEngineContext(engine)}},
      {"prepare_store", {key32, Int(1)}},
      {"prepare_store", {tagged, Int(1)}},
      {"abort_store", {key32, Int(1)}},
      {"commit_store", {key32, Int(1), Encoder().Bin("").Take()}},
      {"lookup", {lookup, Int(1)}},
      {"lookup", {hinted, Int(1)}},
      {"lookup", {skipped, Int(1)}},
      {"query_prefetch_status", {Str("fuzz-request")}},
      {"wait_prefetch_status", {Str("fuzz-request"), Encoder().Float(0.01).Take()}},
      {"query_prefetch_lookup_hits", {Str("fuzz-request")}},
      {"prepare_retrieve", {key32, Int(1)}},
      {"commit_retrieve", {key32, Int(1)}},
      {"free_lookup_locks", {lookup, Int(1)}},
      {"end_session", {Str("fuzz-request")}},
      {"unregister_kv_cache_engine_driven_context", {Int(1)}},
      {"ping", {Int(1)}},
      {"ping", {Encoder().Nil().Take()}},
      {"clear", {Encoder().Bool(true).Take()}},
      {"get_chunk_size", {}},
      {"noop", {}},
      {"server_info", {}},
      {"stats", {}},
      {"report_block_allocation", {Int(1), Str("fuzz-model"), Encoder().Array(0).Take()}},
      {"store",
       {key32, Int(1), Encoder().Array(1).Array(2).Int(0).Int(1).Take(),
        Encoder().Bin(std::string(64, '\0')).Take()}},
  };
  int n = 0;
  for (const auto& [op, payloads] : seeds) {
    for (std::uint8_t flags : {0, 1, 4}) {
      Write(requests / ("seed-" + std::to_string(n++)), fuzz::MakeFuzzInput(index.at(op), flags, payloads));
    }
    for (const std::string& payload : payloads) {
      Write(frames / ("seed-" + std::to_string(n++)), payload);
    }
  }
  Registration registration{"lmcache_l1_pool_1", 1u << 30, "boot", 8192, std::nullopt};
  Write(frames / "registration", protocol::EncodeRegistration(registration));
  PrepareStoreReply prepared;
  prepared.slots.push_back({4096, 8192, {2, 1, 16, 8}, "bfloat16"});
  prepared.chunk_indices.push_back(0);
  Write(frames / "prepare-store-reply", protocol::EncodePrepareStoreReply(prepared));
  Write(frames / "prepare-retrieve-reply",
        protocol::EncodePrepareRetrieveReply({true, prepared.slots}));
  Write(frames / "error", protocol::EncodeErrorMap(Status(ErrorCode::kNotFound, "gone")));
  // The P2P operations' payloads, in the reference's shapes (p2p-spec 4.2).
  const std::vector<protocol::P2pObjectKey> p2p_keys = {
      {std::string(32, 'a'), "m", 16777472, 0, ""}, {std::string(32, 'b'), "m", 16777472, 1, "t"}};
  Write(frames / "p2p-keys", protocol::EncodeP2pKeys(p2p_keys));
  protocol::P2pLayouts layouts;
  layouts.by_group = {{0, {{{2, 32, 256, 1024}}, {"bfloat16"}}}, {1, {{{4}}, {"uint8"}}}};
  Write(frames / "p2p-group-layouts", protocol::EncodeP2pLayouts(layouts));
  layouts.single = true;
  layouts.by_group.erase(1);
  Write(frames / "p2p-single-layout", protocol::EncodeP2pLayouts(layouts));
  const std::vector<protocol::P2pAddress> addresses = {{4096, 1 << 20}, {-1, 0}};
  Write(frames / "p2p-addresses", protocol::EncodeP2pAddresses(addresses));
  // L2 objects as the fs and resp adapters write them.
  store::ObjectKey object_key;
  object_key.chunk_hash.fill(0x3c);
  object_key.model_name = "org/fuzz-model";
  object_key.kv_rank = *store::PackKvRank(2, 1);
  object_key.cache_salt = "tenant";
  for (const std::size_t payload_bytes : {0, 1, 100, 4096}) {
    const std::string payload(payload_bytes, '\x5a');
    const auto span = std::as_bytes(std::span(payload.data(), payload.size()));
    for (const std::size_t align : {1, 4096}) {
      // Tagged (format version 3) when the payload is 100 bytes.
      object_key.tags = payload_bytes == 100 ? "application_version%v2%tenant%a" : "";
      const std::string object = tier::EncodeObjectHeader(object_key, span, align) + payload;
      const std::string name = std::to_string(payload_bytes) + "-" + std::to_string(align);
      Write(objects / ("object-" + name), object);
      // The same object as an S3 GET's body, in pieces of 7 and of 256 bytes.
      Write(s3_replies / ("get-7-" + name), std::string("\1\6") + object);
      Write(s3_replies / ("get-256-" + name), std::string("\1\xff") + object);
      // A pipeline's replies as Redis sends them to the resp adapter: ASKING's
      // OK, a redirection, an EXISTS count, a miss, then the GET of the object.
      Write(replies / ("get-" + name), "+OK\r\n-ASK 866 127.0.0.1:7002\r\n:1\r\n$-1\r\n$" +
                                           std::to_string(object.size()) + "\r\n" + object +
                                           "\r\n");
    }
  }
  // Encoded objects (format version 4), as a serde writes them: fp8 codes of
  // bfloat16 and float32 objects, tagged and not.
  for (const auto& [codec, element, raw_bytes] :
       {std::tuple{tier::PayloadCodec::kFp8E4M3, tier::ElementType::kBFloat16, std::size_t{200}},
        std::tuple{tier::PayloadCodec::kFp8E5M2, tier::ElementType::kFloat32, std::size_t{400}}}) {
    const std::size_t encoded = *tier::EncodedBytesBound(codec, element, raw_bytes);
    std::string payload(encoded, '\0');
    for (std::size_t i = 0; i < encoded; ++i) payload[i] = static_cast<char>(i * 37);
    const auto span = std::as_bytes(std::span(payload.data(), payload.size()));
    object_key.tags = element == tier::ElementType::kFloat32 ? "tenant%b" : "";
    const std::string object =
        tier::EncodeObjectHeader(object_key, span, 1, {codec, element, raw_bytes}) + payload;
    Write(objects / ("encoded-" + std::string(tier::PayloadCodecName(codec))), object);
    Write(s3_replies / ("get-encoded-" + std::string(tier::PayloadCodecName(codec))),
          std::string("\1\x10") + object);
  }
  // What Ceph RGW 16.2.15 (Debian 12, tools/ceph_s3.sh) sent: a
  // ListObjectsV2 page of three objects (max-keys=2) and the refusal of a
  // wrong secret, captured with curl --aws-sigv4.
  Write(
      s3_replies / "rgw-list-page",
      std::string("\0") +
          R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>lmc-cap</Name><Prefix></Prefix><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><Contents><Key>README</Key><LastModified>2026-12-07T06:41:22.978Z</LastModified><ETag>&quot;b1946ac92492d2347c6235b4d2611184&quot;</ETag><Size>6</Size><StorageClass>STANDARD</StorageClass><Type>Normal</Type></Contents><Contents><Key>m@00000000@0@00010203040506070000000000000000000000000000000000000000000000005a</Key><LastModified>2026-12-07T06:41:21.284Z</LastModified><ETag>&quot;b1946ac92492d2347c6235b4d2611184&quot;</ETag><Size>6</Size><StorageClass>STANDARD</StorageClass><Type>Normal</Type></Contents><NextContinuationToken>m@00000000@0@00010203040506070000000000000000000000000000000000000000000000005a</NextContinuationToken><KeyCount>2</KeyCount></ListBucketResult>)");
  Write(
      s3_replies / "rgw-error",
      std::string("\0") +
          R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message></Message><RequestId>tx000009a2d2a642dc2183d-006b165513-1008-default</RequestId><HostId>1008-default-default</HostId></Error>)");
  // A lossless object of bfloat16 values (its planes, the top one zstd's).
  {
    std::string raw(4096, '\0');
    for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i % 2 ? 0x3F : i * 7);
    const auto raw_span = std::as_bytes(std::span(raw.data(), raw.size()));
    std::string payload(*tier::EncodedBytesBound(tier::PayloadCodec::kLossless,
                                                 tier::ElementType::kBFloat16, raw.size()),
                        '\0');
    const auto n = *tier::EncodePayload(tier::PayloadCodec::kLossless, tier::ElementType::kBFloat16,
                                        raw_span, std::as_writable_bytes(std::span(payload)));
    payload.resize(n);
    const auto span = std::as_bytes(std::span(payload.data(), payload.size()));
    object_key.tags = "";
    Write(objects / "encoded-lossless",
          tier::EncodeObjectHeader(
              object_key, span, 1,
              {tier::PayloadCodec::kLossless, tier::ElementType::kBFloat16, raw.size()}) +
              payload);
  }
  // The takeover protocol (first byte: 0 hello, 1 verdict, 2 image), the
  // image exported from this seed writer's own pool with a few objects in it
  // (one read-locked, one staged) and the registration of `engine`.
  restart::TakeoverHello hello;
  hello.geometry = {l1.shm_name,
                    {l1.size_bytes, 4096, 2u << 20, 64u << 20},
                    store::ChunkSizes(16, {{"glm", 640}})};
  Write(handover / "hello", '\0' + restart::EncodeHello(hello));
  {
    // A descriptor as a real channel gives it (its worker's real address).
    std::vector<std::byte> pool(1 << 20);
    auto channel = fleet::UcxChannel::Create(pool.data(), pool.size(), &SteadyClock::Instance(),
                                             fleet::FleetDataKey{});
    fleet::PeerInfo info{.boot_id = "boot",
                         .chunk_size = 16,
                         .hash_algorithm = "blake3",
                         .none_hash = std::string(32, '\0'),
                         .advertise_url = "10.0.0.1:5557",
                         .key_fingerprint = "0123456789abcdef",
                         .data_channel = {"address", 4096}};
    if (channel.ok()) {
      Write(handshakes / "descriptor-real", '\0' + (*channel)->Descriptor().Encode());
      info.data_channel = (*channel)->Descriptor();
    }
    Write(handshakes / "descriptor-small", '\0' + fleet::UcxDescriptor{"address", 4096}.Encode());
    // A server_info reply as a fleet member gets it (server/admin_ops.cc).
    msgpk::MapWriter reply;
    reply.Field("version").Str("seed");
    reply.Field("chunk_size").Int(16);
    info.Encode(reply.Field(fleet::kPeerInfoField));
    Write(handshakes / "server-info", '\1' + reply.Take());
    // The same with models cut otherwise (--model-chunk-size).
    info.model_chunk_sizes = {{"zai-org/GLM-5.3-Flash", 640}, {"mla", 384}};
    msgpk::MapWriter models;
    models.Field("version").Str("seed");
    info.Encode(models.Field(fleet::kPeerInfoField));
    Write(handshakes / "server-info-models", '\1' + models.Take());
    Write(handshakes / "hello", '\2' + fleet::PeerHello{"10.0.0.1:5557", "boot"}.Encode());
    fleet::ChunkPage page{7, 3, false, {{2, fleet::DirectoryChange::kStored, {1, 2}},
                                        {3, fleet::DirectoryChange::kRemoved, {2}}}};
    Write(handshakes / "chunk-page", '\3' + fleet::EncodeChunkPage(page));
    Write(handshakes / "chunk-listing",
          '\4' + fleet::EncodeChunkListing({7, 3, 65536, {1, 2, 3}, "next"}));
  }
  {
    // Data channel replies signed under ucx_reply_fuzzer's key (bytes 0..31):
    // one with bytes and their digest, one refusal.
    fleet::FleetDataKey key;
    for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i);
    const fleet::DataChannelKeys channel_keys = fleet::DataChannelKeys::From(key);
    const std::string bytes(300, 'k');
    fleet::ReadReply with_bytes;
    with_bytes.id = fleet::NewReadId();
    with_bytes.size = bytes.size();
    with_bytes.flags = fleet::kHasDigest;
    fleet::SignReply(channel_keys, std::as_bytes(std::span(bytes)), &with_bytes);
    Write(channel_replies / "reply-with-bytes",
          std::string(reinterpret_cast<const char*>(&with_bytes), sizeof(with_bytes)) + bytes);
    fleet::ReadReply refusal;
    refusal.id = fleet::NewReadId();
    refusal.status = static_cast<std::uint32_t>(ErrorCode::kNotFound);
    fleet::SignReply(channel_keys, {}, &refusal);
    Write(channel_replies / "refusal",
          std::string(reinterpret_cast<const char*>(&refusal), sizeof(refusal)));
  }
  Write(handover / "verdict", '\1' + restart::EncodeVerdict({restart::Verdict::kRefused, "no"}));
  std::vector<store::ObjectKey> keys(3, object_key);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i].chunk_hash[0] = static_cast<std::uint8_t>(i);
  auto stored = cache->table().ReserveWrite(std::span(keys).first(2), 4096, store::Owner::Internal(7),
                                            store::AllocationMode::kAllOrNothing);
  if (stored.ok()) (void)cache->table().FinishWrite(stored->lease);
  store::ReadRequest read;
  read.keys = std::span(keys).first(1);
  read.owner = store::Owner::Session(1);
  (void)cache->table().AcquireRead(read);
  (void)cache->table().ReserveWrite(std::span(keys).last(1), 4096, store::Owner::Internal(7),
                                    store::AllocationMode::kAllOrNothing);
  auto layout = worker::MakeChunkLayout(engine, 16);
  restart::HandoverImage image{"boot", l1.shm_name, cache->StopAndExport(), {}};
  if (layout.ok()) image.registrations.push_back({1, "fuzz-model", 1, *layout});
  Write(handover / "image", '\2' + restart::EncodeImage(image));

  // A journal as a server writes it: a slab, three sealed objects (one with
  // salt and tags), one slot lent and not committed, one object freed.
  {
    const std::vector<std::byte> pool = fuzz::JournalPool();
    auto written = restart::PoolJournal::Create(l1.shm_name, fuzz::kJournalGeometry, pool);
    if (written.ok()) {
      restart::PoolJournal& j = **written;
      (void)j.Publish();
      j.ReadyBytes(fuzz::kJournalPoolBytes);
      j.SlabAdded({2, 4, 16 << 10});
      store::ObjectKey salted = object_key;
      salted.cache_salt = "tenant";
      salted.tags = "team%infra";
      for (std::uint64_t i = 0; i < 4; ++i) {
        const alloc::Offset at[] = {(2ull << 14) + i * (16 << 10)};
        j.Lent(at, 16 << 10);
        j.Committed(i == 1 ? salted : keys[i % keys.size()], at[0], 16 << 10, std::nullopt);
      }
      (void)j.WaitSealed(std::chrono::seconds(10));
      j.Freed((2ull << 14) + 3 * (16 << 10));
      const alloc::Offset lent[] = {(2ull << 14) + 5 * (16 << 10)};
      j.Lent(lent, 16 << 10);
      auto file = restart::JournalFile::Open(l1.shm_name);
      if (file.ok()) Write(journal / "journal", fuzz::InputFromJournal(file->bytes()));
    }
  }
  std::cout << "wrote " << n + 16 << " seeds\n";
  return 0;
}
