// The built-in chat page served at GET /: one self-contained HTML document (no build step, no
// external resources) that streams answers from /v1/chat/completions. `?q=TEXT` sends TEXT on
// load, which headless browser tests use.
#pragma once

namespace lancet::server {

const char* chat_page_html();

}  // namespace lancet::server
