// Helpers for the io tests: raw file writing, hand-built safetensors images and an
// independent reader (Python's json + struct + numpy) to compare tensor bytes with.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.h"

namespace lancet::testing {

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors image from a literal header and data section (no validation, no padding).
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// Runs a Python reader that parses `path` by hand and prints, per line, for the tensor `name`:
// "<dtype> <shape...> | v0 v1 ..." with the first n elements as float (via numpy).
inline std::string python_peek(const std::string& path, const std::string& name, int n) {
  const std::string script = R"PY(
import json, struct, sys
import numpy as np
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    (hl,) = struct.unpack("<Q", f.read(8))
    hdr = json.loads(f.read(hl))
    e = hdr[name]
    b, en = e["data_offsets"]
    f.seek(8 + hl + b)
    raw = f.read(en - b)
dt = e["dtype"]
if dt == "BF16":
    v = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
else:
    v = np.frombuffer(raw, dtype={"F32": np.float32, "F16": np.float16, "I64": np.int64,
                                  "I32": np.int32, "U8": np.uint8, "I8": np.int8}[dt])
print(dt, " ".join(str(d) for d in e["shape"]), "|", " ".join(repr(float(x)) for x in v[:n]))
)PY";
  const std::string dir = make_temp_dir();
  write_file(dir + "/peek.py", script);
  std::string out;
  int rc = run_command(python() + " " + dir + "/peek.py '" + path + "' '" + name + "' " +
                           std::to_string(n),
                       &out);
  EXPECT_EQ(rc, 0) << out;
  return out;
}

// Parses the numbers after '|' in python_peek's output.
inline std::vector<double> peek_values(const std::string& line) {
  std::vector<double> v;
  auto bar = line.find('|');
  if (bar == std::string::npos) return v;
  std::istringstream is(line.substr(bar + 1));
  double x;
  while (is >> x) v.push_back(x);
  return v;
}

}  // namespace lancet::testing
