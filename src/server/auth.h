// API-key check for /v1/* routes: "Authorization: Bearer KEY" compared in constant time
// (the time taken does not depend on how much of the key matched).
#pragma once

#include <string>
#include <string_view>

namespace lancet::server {

// True when `expected` is empty (no key configured) or the header carries exactly that key.
bool authorized(std::string_view authorization_header, const std::string& expected);
// Comparison whose running time depends only on the lengths, not on the contents.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace lancet::server
