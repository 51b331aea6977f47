// Encode throughput of lancet's tokenizer on a text file, for bench_tokenizer.py.
//   encode_bench TOKENIZER_JSON CORPUS [--repeat N] [--threads T] [--dump-ids OUT]
// Prints one JSON line: bytes, tokens, best single-thread seconds and MB/s, and batch-encode
// MB/s for each thread count (the corpus cut into lines, encoded with encode_batch).
// --dump-ids writes the single-thread ids, one per line, so the script can check them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS [--repeat N] [--threads 1,2,4] "
                         "[--dump-ids OUT]\n", argv[0]);
    return 2;
  }
  int repeat = 3;
  std::vector<int> threads = {1, 2};
  std::string dump;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeat") repeat = std::atoi(argv[i + 1]);
    if (flag == "--dump-ids") dump = argv[i + 1];
    if (flag == "--threads") {
      threads.clear();
      std::stringstream ss(argv[i + 1]);
      std::string t;
      while (std::getline(ss, t, ',')) threads.push_back(std::atoi(t.c_str()));
    }
  }
  const double t_load = now_s();
  auto tok = lancet::Tokenizer::from_json_file(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  const double load_s = now_s() - t_load;
  std::ifstream f(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();

  // Single thread, whole corpus as one text. The first run warms the piece cache like any
  // long-running server would be warm; report the best of `repeat` runs.
  std::vector<int32_t> ids;
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const double t0 = now_s();
    ids = tok->encode(text);
    best = std::min(best, now_s() - t0);
  }
  // Batch: one text per line.
  std::vector<std::string> lines;
  {
    std::stringstream ls(text);
    std::string line;
    while (std::getline(ls, line)) lines.push_back(line + "\n");
  }
  std::string batch_json;
  for (int t : threads) {
    double bbest = 1e30;
    for (int r = 0; r < repeat; ++r) {
      const double t0 = now_s();
      auto out = tok->encode_batch(lines, {}, t);
      bbest = std::min(bbest, now_s() - t0);
    }
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s\"%d\": %.2f", batch_json.empty() ? "" : ", ", t,
                  text.size() / bbest / 1e6);
    batch_json += buf;
  }
  if (!dump.empty()) {
    std::ofstream o(dump);
    for (int32_t id : ids) o << id << "\n";
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.3f, \"single_s\": %.4f, "
              "\"single_mb_s\": %.2f, \"batch_mb_s\": {%s}}\n",
              text.size(), ids.size(), load_s, best, text.size() / best / 1e6, batch_json.c_str());
  return 0;
}
