// Idle and slow connections cost the server memory, not threads (the connection layer's event
// loop): with 1,000 idle keep-alive connections and 200 clients that send their request header
// a byte at a time open at once - several times the server's worker threads - /health still
// answers, several streams complete, and afterwards every idle connection still answers on
// the same socket and every slow client gets its answer once its header is complete.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "in_process_server.h"
#include "raw_http.h"
#include "runtime/runtime.h"
#include "server/serving_model.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

using json = nlohmann::json;

constexpr int kStreams = 4;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads one response with a Content-Length body; its status, or -1 when the connection closed
// or nothing came within `timeout_s`.
int read_response(int fd, double timeout_s) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    const size_t head = text.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = text.find("Content-Length: ");
      const size_t len = cl == std::string::npos || cl > head ? 0 : std::stoul(text.substr(cl + 16));
      if (text.size() >= head + 4 + len) return std::stoi(text.substr(9, 3));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return -1;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return -1;
    text.append(buf, static_cast<size_t>(n));
  }
}

// The connections the test may open (each costs two descriptors here: client and server end).
int descriptor_budget() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  getrlimit(RLIMIT_NOFILE, &lim);
  return static_cast<int>(std::min<rlim_t>(lim.rlim_cur, 1 << 20) - 256) / 2;
}

// One streamed completion; true when it ended with [DONE] after at least one token.
bool stream_completes(int port, int i) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120);
  const json body = {{"prompt", "Count to " + std::to_string(i + 3) + ":"}, {"max_tokens", 8}, {"temperature", 0},
                     {"stream", true}};
  std::string sse;
  auto r = cli.Post("/v1/completions", httplib::Headers{}, body.dump(), "application/json");
  if (!r || r->status != 200) return false;
  sse = r->body;
  return sse.find("\"text\"") != std::string::npos && sse.rfind("data: [DONE]\n\n") == sse.size() - 14;
}

TEST(ConnectionLoad, IdleConnectionsDoNotStarveHealth) {
  ASSERT_FALSE(default_model().empty()) << "default model missing: run tools/fetch_model.sh";
  const int budget = descriptor_budget();
  const int kSlow = std::min(200, budget / 6);
  const int kIdle = std::min(1000, budget - kSlow);
  ASSERT_GE(kIdle, 500) << "the open-file limit is too low for this test";

  RuntimeConfig rc;
  rc.model = default_model();
  rc.max_model_len = 256;
  rc.kv_cache_memory = int64_t{64} << 20;
  rc.max_num_seqs = kStreams;
  auto rt = Runtime::create(rc);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  const std::unique_ptr<server::ServingModel> model = server::make_runtime_model(rt->get());
  server::ServerConfig cfg = test_config();
  cfg.max_concurrent_requests = kStreams;  // kStreams + 16 worker threads
  // Deadlines far beyond the test's run: every connection stays open throughout, as the
  // clients want.
  cfg.header_timeout_s = 300;
  cfg.keep_alive_timeout_s = 300;
  InProcessServer server(cfg);
  server.server().set_model(model.get());

  // Idle keep-alive connections: one request each, then nothing.
  const std::string version = "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(send_all(fd, version));
    ASSERT_EQ(read_response(fd, 30), 200) << "idle connection " << i;
    idle.push_back(fd);
  }
  // Slow clients: all but the last 4 bytes of a header, a byte at a time to every client in
  // turn.
  const std::string slow_request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n";
  const size_t held_back = 4;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0) << "slow connection " << i;
    slow.push_back(fd);
  }
  for (size_t b = 0; b + held_back < slow_request.size(); ++b)
    for (int fd : slow) ASSERT_TRUE(send_all(fd, slow_request.substr(b, 1)));

  // With every idle and slow connection open, /health answers and streams complete.
  {
    httplib::Client cli("127.0.0.1", server.port());
    cli.set_read_timeout(60);
    auto r = cli.Get("/health");
    ASSERT_TRUE(r) << "/health did not answer";
    EXPECT_EQ(r->status, 200);
  }
  std::atomic<int> completed{0};
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i)
    streams.emplace_back([&, i] { completed += stream_completes(server.port(), i) ? 1 : 0; });
  for (std::thread& t : streams) t.join();
  EXPECT_EQ(completed.load(), kStreams);

  // Nothing was dropped to get there: every idle connection answers its next request, and
  // every slow client its request once the header is complete.
  int idle_answered = 0;
  for (int fd : idle) idle_answered += send_all(fd, version) && read_response(fd, 30) == 200;
  EXPECT_EQ(idle_answered, kIdle);
  for (int fd : slow) ASSERT_TRUE(send_all(fd, slow_request.substr(slow_request.size() - held_back)));
  int slow_answered = 0;
  for (int fd : slow) slow_answered += read_response(fd, 30) == 200;
  EXPECT_EQ(slow_answered, kSlow);

  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
}

// A client that stops sending in the middle of its header gets 408 at the header deadline
// and the connection is closed; an idle keep-alive connection is closed at its timeout.
TEST(ConnectionLoad, HeaderDeadlineAnswers408AndIdleTimeoutCloses) {
  server::ServerConfig cfg = test_config();
  cfg.header_timeout_s = 0.5;
  cfg.keep_alive_timeout_s = 0.5;
  InProcessServer server(cfg);
  const RawReply partial = raw_exchange(server.port(), "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n", 20);
  EXPECT_EQ(response_statuses(partial.text), std::vector<int>{408}) << partial.text;
  EXPECT_NE(partial.text.find("\"code\":\"timeout\""), std::string::npos) << partial.text;
  EXPECT_TRUE(partial.closed);
  const RawReply idle = raw_exchange(server.port(), "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 20);
  EXPECT_EQ(response_statuses(idle.text), std::vector<int>{200}) << idle.text;
  EXPECT_TRUE(idle.closed) << "the idle connection was kept past its keep-alive timeout";
}

// A body that stops arriving gets 408 at the body deadline.
TEST(ConnectionLoad, BodyDeadlineAnswers408) {
  server::ServerConfig cfg = test_config();
  cfg.body_timeout_s = 0.5;
  InProcessServer server(cfg);
  const RawReply r = raw_exchange(server.port(),
                                  "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                  "Content-Length: 100\r\n\r\n{\"prompt\":",
                                  20);
  EXPECT_EQ(response_statuses(r.text), std::vector<int>{408}) << r.text;
  EXPECT_TRUE(r.closed);
}

// A header larger than the loop reads is refused with the envelope, not read without end.
TEST(ConnectionLoad, HugeHeaderGets431FromTheLoop) {
  server::ServerConfig cfg = test_config();
  InProcessServer server(cfg);
  const std::string big(64 << 10, 'a');
  const RawReply r = raw_exchange(server.port(), "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + big, 20);
  EXPECT_EQ(response_statuses(r.text), std::vector<int>{431}) << r.text.substr(0, 200);
  EXPECT_TRUE(r.closed);
}

}  // namespace
}  // namespace lancet::testing
