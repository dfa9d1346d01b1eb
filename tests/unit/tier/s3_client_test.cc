// S3Client against a fake S3 endpoint in the test (cpp-httplib): what the
// real gateway will not do on demand (503 SlowDown, 500s, a reply slower
// than the deadline, a port nobody listens on), and what every request
// carries. The real gateway is s3_adapter_test's.
#include "tier/s3/s3_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "fakes/free_port.h"
#include "fakes/temp_dir.h"

namespace lmcache::tier {
namespace {

class FakeS3 {
 public:
  FakeS3() {
    server_.Put("/bucket/(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      Seen(req);
      bodies_[req.matches[1]] = req.body;
      res.status = 200;
    });
    server_.Get("/bucket/(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      const int n = Seen(req);
      const std::string name = req.matches[1];
      if (name == "slow-down" && n <= 2) {
        res.status = 503;
        res.set_content(
            "<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
            "</Message></Error>",
            "application/xml");
      } else if (name == "broken") {
        res.status = 500;
      } else if (name == "sleepy") {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        res.set_content("late", "text/plain");
      } else if (name == "missing") {
        res.status = 404;
        res.set_content("<Error><Code>NoSuchKey</Code></Error>", "application/xml");
      } else {
        res.set_content("body of " + name, "application/octet-stream");
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeS3() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  int attempts() const { return attempts_.load(); }
  std::string header(const std::string& name) {
    std::lock_guard lock(mu_);
    return headers_[name];
  }
  std::string body(const std::string& name) {
    std::lock_guard lock(mu_);
    return bodies_[name];
  }

 private:
  int Seen(const httplib::Request& req) {
    std::lock_guard lock(mu_);
    for (const auto& [name, value] : req.headers) headers_[name] = value;
    return ++attempts_;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> attempts_{0};
  std::mutex mu_;
  std::map<std::string, std::string> headers_;
  std::map<std::string, std::string> bodies_;
};

S3ClientConfig Config(int port) {
  S3ClientConfig c;
  c.scheme = "http";
  c.host = "127.0.0.1:" + std::to_string(port);
  c.bucket = "bucket";
  c.virtual_hosted = false;
  c.region = "us-east-1";
  c.credentials = {"AKID", "SECRET", ""};
  c.request_timeout = std::chrono::milliseconds(3000);
  c.backoff = std::chrono::milliseconds(5);
  return c;
}

S3Response Call(S3Client& client, S3Method method, const std::string& object,
                std::vector<std::span<const std::byte>> body = {}) {
  std::promise<S3Response> answer;
  auto future = answer.get_future();
  S3Call call;
  call.method = method;
  call.object = object;
  call.body = std::move(body);
  call.done = [&answer](S3Response r) { answer.set_value(std::move(r)); };
  client.Submit(std::move(call));
  return future.get();
}

TEST(S3ClientTest, PutSendsItsPiecesSigned) {
  FakeS3 fake;
  auto client = S3Client::Create(Config(fake.port())).value();
  const std::string head = "header|";
  const std::string payload(300'000, 'p');
  const S3Response r = Call(*client, S3Method::kPut, "model/a@b",
                            {std::as_bytes(std::span(head)), std::as_bytes(std::span(payload))});
  ASSERT_TRUE(r.ok()) << r.error.message() << " " << r.http_status;
  EXPECT_EQ(fake.body("model/a@b"), head + payload);
  EXPECT_TRUE(fake.header("Authorization").starts_with("AWS4-HMAC-SHA256 Credential=AKID/"))
      << fake.header("Authorization");
  EXPECT_NE(fake.header("Authorization").find("/us-east-1/s3/aws4_request"), std::string::npos);
  EXPECT_EQ(fake.header("x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
  EXPECT_EQ(fake.header("x-amz-date").size(), 16u);
  EXPECT_EQ(fake.header("Expect"), "");  // no 100-continue round trip
}

TEST(S3ClientTest, SlowDownIsRetriedWithBackoff) {
  FakeS3 fake;
  auto client = S3Client::Create(Config(fake.port())).value();
  const S3Response r = Call(*client, S3Method::kGet, "slow-down");
  ASSERT_TRUE(r.ok()) << r.http_status;
  EXPECT_EQ(r.body, "body of slow-down");
  EXPECT_EQ(r.attempts, 3u);
  EXPECT_EQ(client->counters().throttled, 2u);
  EXPECT_EQ(client->counters().retries, 2u);
}

TEST(S3ClientTest, ServerErrorsStopAtMaxAttemptsAndMissesAreNotRetried) {
  FakeS3 fake;
  S3ClientConfig config = Config(fake.port());
  config.max_attempts = 3;
  auto client = S3Client::Create(config).value();
  const S3Response broken = Call(*client, S3Method::kGet, "broken");
  EXPECT_TRUE(broken.error.ok());
  EXPECT_EQ(broken.http_status, 500);
  EXPECT_EQ(broken.attempts, 3u);
  const S3Response missing = Call(*client, S3Method::kGet, "missing");
  EXPECT_EQ(missing.http_status, 404);
  EXPECT_EQ(missing.attempts, 1u);
  EXPECT_NE(missing.body.find("NoSuchKey"), std::string::npos);
}

TEST(S3ClientTest, TheDeadlineEndsASlowCall) {
  FakeS3 fake;
  S3ClientConfig config = Config(fake.port());
  config.request_timeout = std::chrono::milliseconds(300);
  auto client = S3Client::Create(config).value();
  const auto start = std::chrono::steady_clock::now();
  const S3Response r = Call(*client, S3Method::kGet, "sleepy");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.error.code(), ErrorCode::kTimeout) << r.error.message();
  EXPECT_LT(took, std::chrono::milliseconds(1400));  // the reply comes at 1500 ms
}

TEST(S3ClientTest, ARefusingGatewayIsDownUntilTheRetryInterval) {
  const int port = lmcache::testing::FreeTcpPorts(1).at(0);
  S3ClientConfig config = Config(port);
  config.retry_interval = std::chrono::milliseconds(200);
  auto client = S3Client::Create(config).value();
  const S3Response first = Call(*client, S3Method::kGet, "x");
  EXPECT_EQ(first.error.code(), ErrorCode::kUnavailable);
  const S3Response second = Call(*client, S3Method::kGet, "x");
  EXPECT_EQ(second.error.code(), ErrorCode::kUnavailable);
  EXPECT_NE(second.error.message().find("retry_interval"), std::string::npos);
  EXPECT_EQ(client->counters().refused_while_down, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  Call(*client, S3Method::kGet, "x");  // probes again
  EXPECT_EQ(client->counters().refused_while_down, 1u);
}

TEST(S3ClientTest, ShutdownCompletesWhatIsInFlight) {
  FakeS3 fake;
  S3ClientConfig config = Config(fake.port());
  auto client = S3Client::Create(config).value();
  std::atomic<int> completed{0};
  for (int i = 0; i < 4; ++i) {
    S3Call call;
    call.object = "sleepy";
    call.done = [&completed](S3Response) { ++completed; };
    client->Submit(std::move(call));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  client.reset();
  EXPECT_EQ(completed.load(), 4);
}

// https verifies the server against the system's CA store, which knows no
// self-signed certificate, and against `ca_bundle` when one is named.
TEST(S3ClientTest, HttpsVerifiesTheServer) {
  lmcache::testing::TempDir dir("s3_client_test");
  const std::string cert = (dir.path() / "cert.pem").string();
  const std::string key = (dir.path() / "key.pem").string();
  const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                           "-addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert +
                           " 2>/dev/null";
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "the openssl command is not installed";
  httplib::SSLServer server(cert.c_str(), key.c_str());
  server.Get("/bucket/(.*)", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("secure " + std::string(req.matches[1]), "application/octet-stream");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread listener([&server] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  S3ClientConfig config = Config(port);
  config.scheme = "https";
  auto untrusted = S3Client::Create(config).value();
  const S3Response refused = Call(*untrusted, S3Method::kGet, "x");
  EXPECT_EQ(refused.error.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.error.message().find("certificate"), std::string::npos)
      << refused.error.message();

  config.ca_bundle = cert;
  auto trusted = S3Client::Create(config).value();
  const S3Response r = Call(*trusted, S3Method::kGet, "x");
  EXPECT_TRUE(r.ok()) << r.error.message() << " " << r.http_status;
  EXPECT_EQ(r.body, "secure x");
  trusted.reset();  // its kept-alive connection would hold the server's stop
  untrusted.reset();
  server.stop();
  listener.join();
}

}  // namespace
}  // namespace lmcache::tier
