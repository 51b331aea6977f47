// RequestFramer over Beast's basic_parser: a parser whose callbacks record the head and count
// the body without storing it (see request_framer.h).
#include "server/request_framer.h"

#include <strings.h>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

namespace lancet::server {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::string_view;

class RequestFramer::Parser final : public http::basic_parser<true> {
 public:
  explicit Parser(RequestHead* head) : head_(head) {}

 private:
  void on_request_impl(http::verb, string_view method, string_view target, int, error_code&) override {
    head_->method.assign(method.data(), method.size());
    const size_t q = target.find('?');
    const string_view path = q == string_view::npos ? target : target.substr(0, q);
    head_->path.assign(path.data(), path.size());
  }
  void on_response_impl(int, string_view, int, error_code&) override {}
  void on_field_impl(http::field name, string_view, string_view value, error_code&) override {
    if (name == http::field::expect && value.size() == 12 && strncasecmp(value.data(), "100-continue", 12) == 0)
      head_->expect_continue = true;
  }
  void on_header_impl(error_code&) override {
    if (const auto n = content_length()) head_->content_length = *n;
    head_->chunked = chunked();
  }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override { return body.size(); }
  void on_finish_impl(error_code&) override {}

  RequestHead* head_;
};

RequestFramer::RequestFramer(size_t header_limit) : parser_(std::make_unique<Parser>(&head_)) {
  parser_->header_limit(static_cast<std::uint32_t>(header_limit));
  parser_->eager(false);  // stop after the header: the caller decides about the body
}

RequestFramer::~RequestFramer() = default;

void RequestFramer::read_body(uint64_t body_limit) {
  if (state_ != State::kHeaderDone) return;
  parser_->body_limit(body_limit);
  parser_->eager(true);
  state_ = parser_->is_done() ? State::kComplete : State::kNeedBody;
}

size_t RequestFramer::feed(const char* data, size_t size) {
  if ((state_ != State::kNeedHeader && state_ != State::kNeedBody) || size == 0) return 0;
  size_t used = 0;
  while (used < size && !parser_->is_done()) {
    error_code ec;
    const size_t n = parser_->put(boost::asio::const_buffer(data + used, size - used), ec);
    used += n;
    if (ec == http::error::need_more) break;
    if (ec == http::error::header_limit) {
      state_ = State::kHeaderTooLarge;
      return used;
    }
    if (ec == http::error::body_limit) {
      state_ = State::kBodyTooLarge;
      return used;
    }
    if (ec) {
      state_ = State::kMalformed;
      return used;
    }
    if (state_ == State::kNeedHeader && parser_->is_header_done()) {
      state_ = State::kHeaderDone;
      return used;
    }
    if (n == 0) break;
  }
  if (parser_->is_done()) state_ = state_ == State::kNeedHeader ? State::kHeaderDone : State::kComplete;
  return used;
}

size_t header_end(const std::string& bytes) {
  const size_t p = bytes.find("\r\n\r\n");
  return p == std::string::npos ? std::string::npos : p + 4;
}

}  // namespace lancet::server
