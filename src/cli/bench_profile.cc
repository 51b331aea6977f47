#include "cli/bench_profile.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace lancet {
namespace {

nlohmann::json profile_json(const OpTimes& t) {
  const double steps = static_cast<double>(t.steps), busy = t.busy_ms();
  nlohmann::json ops = nlohmann::json::object();
  for (int k = 0; k < kNumOpKinds; ++k) {
    if (t.calls[k] == 0) continue;
    ops[op_kind_name(static_cast<OpKind>(k))] = {{"ms_per_step", t.ms[k] / steps},
                                                 {"calls_per_step", static_cast<double>(t.calls[k]) / steps},
                                                 {"share", busy > 0 ? t.ms[k] / busy : 0.0}};
  }
  return {{"steps", t.steps},
          {"busy_ms_per_step", busy / steps},
          {"gap_ms_per_step", t.gaps > 0 ? t.gap_ms / static_cast<double>(t.gaps) : 0.0},
          {"ops", ops}};
}

}  // namespace

void add_step_profile(const StepProfile& p, nlohmann::json* j) {
  nlohmann::json sp = nlohmann::json::object();
  if (p.decode.steps > 0) sp["decode"] = profile_json(p.decode);
  if (p.prompt.steps > 0) sp["prompt"] = profile_json(p.prompt);
  if (!sp.empty()) (*j)["step_profile"] = sp;
}

void print_step_profile(const nlohmann::json& j) {
  if (!j.contains("step_profile")) return;
  const nlohmann::json& sp = j["step_profile"];
  const char* cols[2] = {"decode", "prompt"};
  std::printf("\nstep profile (device ms per step, events around each op; steps run eagerly)\n");
  std::printf("%-12s", "op");
  for (const char* c : cols)
    if (sp.contains(c))
      std::printf(" %12s %6s %7s", (std::string(c) + " ms").c_str(), "share", "calls");
  std::printf("\n");
  for (int k = 0; k < kNumOpKinds; ++k) {
    const char* name = op_kind_name(static_cast<OpKind>(k));
    bool any = false;
    for (const char* c : cols) any = any || (sp.contains(c) && sp[c]["ops"].contains(name));
    if (!any) continue;
    std::printf("%-12s", name);
    for (const char* c : cols) {
      if (!sp.contains(c)) continue;
      if (!sp[c]["ops"].contains(name)) {
        std::printf(" %12s %6s %7s", "", "", "");
        continue;
      }
      const nlohmann::json& o = sp[c]["ops"][name];
      std::printf(" %12.3f %5.1f%% %7.1f", o["ms_per_step"].get<double>(), 100.0 * o["share"].get<double>(),
                  o["calls_per_step"].get<double>());
    }
    std::printf("\n");
  }
  for (const char* row : {"busy_ms_per_step", "gap_ms_per_step", "steps"}) {
    std::printf("%-12s", row[0] == 'b' ? "busy" : row[0] == 'g' ? "idle between" : "steps");
    for (const char* c : cols) {
      if (!sp.contains(c)) continue;
      if (row[0] == 's')
        std::printf(" %12lld %6s %7s", static_cast<long long>(sp[c][row].get<int64_t>()), "", "");
      else
        std::printf(" %12.3f %6s %7s", sp[c][row].get<double>(), "", "");
    }
    std::printf("\n");
  }
}

namespace {

nlohmann::json timeline_json(const DeviceTimelinePart& t) {
  const double gap_mean = t.gaps > 0 ? t.gap_seconds / static_cast<double>(t.gaps) : 0.0;
  const double total = t.busy_seconds + t.gap_seconds;
  return {{"steps", t.steps},
          {"busy_ms_per_step", t.steps > 0 ? 1e3 * t.busy_seconds / static_cast<double>(t.steps) : 0.0},
          {"gaps", t.gaps},
          {"gap_us_mean", 1e6 * gap_mean},
          {"gap_us_p50", 1e6 * percentile(t.gap_samples, 50)},
          {"gap_us_p99", 1e6 * percentile(t.gap_samples, 99)},
          {"gap_us_max", 1e6 * t.max_gap_seconds},
          {"idle_share", total > 0 ? t.gap_seconds / total : 0.0}};
}

}  // namespace

void add_device_timeline(const DeviceTimelineStats& t, nlohmann::json* j) {
  if (t.steps == 0) return;
  nlohmann::json tl = timeline_json(t);
  if (t.decode.steps > 0) tl["decode"] = timeline_json(t.decode);
  if (t.prompt.steps > 0) tl["prompt"] = timeline_json(t.prompt);
  (*j)["device_timeline"] = tl;
}

void print_device_timeline(const nlohmann::json& j, int width) {
  if (!j.contains("device_timeline")) return;
  const nlohmann::json& t = j["device_timeline"];
  std::printf("%-*s %.1f us idle between steps (p50 %.1f, p99 %.1f, max %.1f; %lld gaps), "
              "%.2f%% idle, %.3f ms busy per step\n",
              width, "device gaps", t["gap_us_mean"].get<double>(), t["gap_us_p50"].get<double>(),
              t["gap_us_p99"].get<double>(), t["gap_us_max"].get<double>(),
              static_cast<long long>(t["gaps"].get<int64_t>()), 100.0 * t["idle_share"].get<double>(),
              t["busy_ms_per_step"].get<double>());
  for (const char* kind : {"decode", "prompt"}) {
    if (!t.contains(kind)) continue;
    const nlohmann::json& k = t[kind];
    std::printf("%-*s %lld %s steps: gap p99 %.1f us, max %.1f us over %lld gaps, %.3f ms busy per step\n", width, "",
                static_cast<long long>(k["steps"].get<int64_t>()), kind, k["gap_us_p99"].get<double>(),
                k["gap_us_max"].get<double>(), static_cast<long long>(k["gaps"].get<int64_t>()),
                k["busy_ms_per_step"].get<double>());
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

}  // namespace lancet
