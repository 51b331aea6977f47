// LoRA on the CUDA backend (BF16 factors, lora.cu) against the CPU backend given the same
// factors already rounded to BF16 (A, and scale * B), so that only the order of the f32
// accumulations differs: max |cuda - cpu| <= 1e-4 * (1 + max |y|). Rows of tokens in no slot,
// or in a slot of rank 0, must be bit-unchanged. Cases: the projections of SmolLM2 (576 ->
// 192) and Llama-3-8B (4096 -> 1024, 14336 -> 4096) at ranks 16 and 64, slots of different
// ranks (one of rank 0 that has rows, one with no rows), rows in shuffled token order; odd
// shapes (input features and ranks that are no multiple of 8, an unaligned x, rank 256); many
// rows per slot; a captured graph replayed with other segments; a row's output the same bits in
// any step; bad rows reported.
// lora_apply_multi: q, k and v of one x (outs 4096/1024/1024 of 4096, and 192/64/64 of 579, with
// a fourth module past the three of one launch), each module with its own slot ranks (rank 0 in
// some modules' slots), decode-like and 2000+ row steps, modules that do not share x, and a
// captured graph replayed with other segments.
#include <algorithm>
#include <iterator>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"

namespace lancet {
namespace {

using namespace lancet::testing;

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct SlotSpec {
  int64_t rank = 0;
  int64_t rows = 0;  // tokens served with the slot
  float scale = 1.0f;
};

struct LoraCase {
  int64_t in = 0, out = 0, R = 0, num_tokens = 0;
  std::vector<SlotSpec> slots;
  int64_t x_offset = 0;  // floats x starts past a 256-byte aligned buffer on the GPU
};

// One step's problem on the host: each slot's factors (f32, unrounded), x, y before the op, and
// the rows grouped by slot, taken from a shuffled order of the tokens.
struct LoraProblem {
  LoraCase c;
  std::vector<std::vector<float>> a, b;  // [rank, in], [out, rank] per slot
  std::vector<float> x, y0;
  std::vector<int32_t> rows, slot_start;
};

LoraProblem make_problem(const LoraCase& c, uint32_t seed) {
  LoraProblem p;
  p.c = c;
  for (size_t s = 0; s < c.slots.size(); ++s) {
    const int64_t r = c.slots[s].rank;
    p.a.push_back(random_floats(static_cast<size_t>(r * c.in), seed + 10 * static_cast<uint32_t>(s) + 1, 0.05f));
    p.b.push_back(random_floats(static_cast<size_t>(c.out * r), seed + 10 * static_cast<uint32_t>(s) + 2, 0.05f));
  }
  p.x = random_floats(static_cast<size_t>(c.num_tokens * c.in), seed + 1000, 1.0f);
  p.y0 = random_floats(static_cast<size_t>(c.num_tokens * c.out), seed + 2000, 1.0f);
  std::vector<int32_t> order(static_cast<size_t>(c.num_tokens));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  p.slot_start.push_back(0);
  for (const SlotSpec& s : c.slots) {
    for (int64_t k = 0; k < s.rows; ++k) p.rows.push_back(order[p.rows.size()]);
    p.slot_start.push_back(static_cast<int32_t>(p.rows.size()));
  }
  EXPECT_LE(static_cast<int64_t>(p.rows.size()), c.num_tokens);
  return p;
}

// Fills every slot of w from p: the GPU takes the f32 factors and its scale (it rounds them
// itself); the CPU takes them rounded as the GPU stores them, at scale 1. Slots of rank 0 are
// first filled with rank-3 factors and then emptied.
void fill_slots(Backend& be, LoraModuleWeights& w, const LoraProblem& p, bool cpu) {
  const LoraCase& c = p.c;
  for (size_t s = 0; s < c.slots.size(); ++s) {
    const SlotSpec& sp = c.slots[s];
    const auto si = static_cast<int64_t>(s);
    if (sp.rank == 0) {
      const int64_t r = std::min<int64_t>(3, c.R);
      const auto a = random_floats(static_cast<size_t>(r * c.in), 77, 1.0f);
      const auto b = random_floats(static_cast<size_t>(c.out * r), 78, 1.0f);
      ASSERT_TRUE(be.set_lora_slot(w, si, a.data(), b.data(), r, 1.0f).ok());
      ASSERT_TRUE(be.set_lora_slot(w, si, nullptr, nullptr, 0, 0.0f).ok());
      continue;
    }
    if (!cpu) {
      ASSERT_TRUE(be.set_lora_slot(w, si, p.a[s].data(), p.b[s].data(), sp.rank, sp.scale).ok());
      continue;
    }
    std::vector<float> a(p.a[s]), b(p.b[s]);
    for (float& v : a) v = round_bf16(v);
    for (float& v : b) v = round_bf16(sp.scale * v);
    ASSERT_TRUE(be.set_lora_slot(w, si, a.data(), b.data(), sp.rank, 1.0f).ok());
  }
}

LoraApplyArgs apply_args(const float* x, float* y, float* scratch, const LoraProblem& p, const LoraModuleWeights* w,
                         const int32_t* rows, const int32_t* slot_start, int64_t num_rows) {
  LoraApplyArgs a;
  a.x = x;
  a.y = y;
  a.scratch = scratch;
  a.num_tokens = p.c.num_tokens;
  a.w = w;
  a.rows = LoraStepRows{static_cast<int64_t>(p.c.slots.size()), num_rows, rows, slot_start};
  return a;
}

// The CPU backend's y for the rows and segments given (default: the problem's).
std::vector<float> cpu_result(Backend& cpu, const LoraProblem& p, const std::vector<int32_t>& rows,
                              const std::vector<int32_t>& slot_start) {
  const LoraCase& c = p.c;
  auto w = cpu.alloc_lora_module(static_cast<int64_t>(c.slots.size()), c.R, c.in, c.out);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (!w.ok()) return {};
  fill_slots(cpu, *w, p, /*cpu=*/true);
  std::vector<float> y(p.y0);
  const auto num_rows = static_cast<int64_t>(rows.size());
  std::vector<float> scratch(static_cast<size_t>(std::max<int64_t>(1, num_rows * c.R)));
  const Status st = cpu.lora_apply(
      apply_args(p.x.data(), y.data(), scratch.data(), p, &*w, rows.data(), slot_start.data(), num_rows));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return y;
}

// Tokens whose y the op changes: those in a slot of nonzero rank.
std::vector<bool> adapted_tokens(const LoraProblem& p, const std::vector<int32_t>& rows,
                                 const std::vector<int32_t>& slot_start) {
  std::vector<bool> adapted(static_cast<size_t>(p.c.num_tokens), false);
  for (size_t s = 0; s < p.c.slots.size(); ++s)
    if (p.c.slots[s].rank > 0)
      for (int32_t k = slot_start[s]; k < slot_start[s + 1]; ++k) adapted[static_cast<size_t>(rows[k])] = true;
  return adapted;
}

void expect_lora_match(const std::vector<float>& got, const std::vector<float>& ref, const LoraProblem& p,
                       const std::vector<bool>& adapted, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const int64_t out = p.c.out;
  float max_ref = 0.0f, max_diff = 0.0f, max_change = 0.0f;
  for (size_t i = 0; i < ref.size(); ++i) max_ref = std::max(max_ref, std::fabs(ref[i]));
  for (int64_t t = 0; t < p.c.num_tokens; ++t) {
    const size_t base = static_cast<size_t>(t * out);
    if (!adapted[static_cast<size_t>(t)]) {
      for (int64_t o = 0; o < out; ++o)
        ASSERT_EQ(f32_to_bits(got[base + o]), f32_to_bits(p.y0[base + o]))
            << what << ": token " << t << " is in no adapted slot but its output " << o << " changed";
      continue;
    }
    for (int64_t o = 0; o < out; ++o) {
      const float g = got[base + o], r = ref[base + o];
      ASSERT_TRUE(std::isfinite(g)) << what << ": token " << t << " output " << o;
      max_diff = std::max(max_diff, std::fabs(g - r));
      max_change = std::max(max_change, std::fabs(r - p.y0[base + o]));
    }
  }
  EXPECT_LE(max_diff, 1e-4f * (1.0f + max_ref)) << what << ": max |cuda - cpu| " << max_diff << ", max |y| " << max_ref;
  if (std::find(adapted.begin(), adapted.end(), true) != adapted.end()) {
    EXPECT_GT(max_change, 1e-3f) << what << ": the adapters changed nothing (the test would prove nothing)";
  }
}

std::string describe(const LoraCase& c) {
  std::string s = "in=" + std::to_string(c.in) + " out=" + std::to_string(c.out) + " R=" + std::to_string(c.R) +
                  " tokens=" + std::to_string(c.num_tokens) + " x_offset=" + std::to_string(c.x_offset) + " slots:";
  for (const SlotSpec& sp : c.slots)
    s += " (rank " + std::to_string(sp.rank) + ", " + std::to_string(sp.rows) + " rows)";
  return s;
}

// The GPU's side of a problem: the module, and x, y, rows, segments and scratch on the device.
struct GpuLora {
  LoraModuleWeights w;
  Buffer x, y, rows, slot_start, scratch;
  int64_t num_rows = 0;
  const float* x_ptr() const { return x.as<float>() + x_off; }
  int64_t x_off = 0;
};

void setup_gpu(Backend& g, const LoraProblem& p, int64_t num_rows, GpuLora* d) {
  const LoraCase& c = p.c;
  auto w = g.alloc_lora_module(static_cast<int64_t>(c.slots.size()), c.R, c.in, c.out);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  d->w = *w;
  EXPECT_EQ(d->w.dtype, DType::kBF16);
  fill_slots(g, d->w, p, /*cpu=*/false);
  std::vector<float> xs(static_cast<size_t>(c.x_offset), 0.0f);
  xs.insert(xs.end(), p.x.begin(), p.x.end());
  d->x = to_device(g, xs);
  d->x_off = c.x_offset;
  d->y = to_device(g, p.y0);
  d->num_rows = num_rows;
  std::vector<int32_t> rows(p.rows);
  rows.resize(static_cast<size_t>(std::max<int64_t>(1, num_rows)), -1);
  d->rows = to_device(g, rows);
  d->slot_start = to_device(g, p.slot_start);
  auto scratch = g.alloc(static_cast<size_t>(std::max<int64_t>(1, num_rows * c.R)) * sizeof(float));
  ASSERT_TRUE(scratch.ok());
  d->scratch = *scratch;
}

Status gpu_apply(Backend& g, const LoraProblem& p, GpuLora& d) {
  return g.lora_apply(apply_args(d.x_ptr(), d.y.as<float>(), d.scratch.as<float>(), p, &d.w, d.rows.as<int32_t>(),
                                 d.slot_start.as<int32_t>(), d.num_rows));
}

void run_case(Backend& g, Backend& c, const LoraCase& lc, uint32_t seed) {
  const std::string what = describe(lc);
  const LoraProblem p = make_problem(lc, seed);
  const std::vector<float> ref = cpu_result(c, p, p.rows, p.slot_start);
  GpuLora d;
  setup_gpu(g, p, static_cast<int64_t>(p.rows.size()), &d);
  if (::testing::Test::HasFatalFailure()) return;
  const Status st = gpu_apply(g, p, d);
  ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
  ASSERT_TRUE(g.synchronize().ok()) << what;
  expect_lora_match(to_host<float>(g, d.y, p.y0.size()), ref, p, adapted_tokens(p, p.rows, p.slot_start), what);
}

// Four slots: full rank, rank 0 with rows, an odd rank, and a slot with no rows.
LoraCase model_case(int64_t in, int64_t out, int64_t R) {
  LoraCase c;
  c.in = in;
  c.out = out;
  c.R = R;
  c.num_tokens = 24;
  c.slots = {{R, 5, 2.0f}, {0, 3, 1.0f}, {R / 2 + 3, 7, 0.5f}, {7, 0, 1.0f}};
  return c;
}

TEST(CudaLora, ModelShapesMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t shapes[][2] = {{576, 192}, {4096, 1024}, {14336, 4096}};
  uint32_t seed = 1;
  for (const auto& sh : shapes)
    for (int64_t R : {16, 64}) run_case(*g, *c, model_case(sh[0], sh[1], R), seed++);
}

TEST(CudaLora, OddShapesMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  std::vector<LoraCase> cases;
  // Input features no multiple of 8 (scalar shrink), rank no multiple of 8 (scalar B staging).
  cases.push_back({579, 77, 5, 13, {{5, 4, 1.5f}, {3, 2, 1.0f}, {0, 1, 1.0f}}, 0});
  // x not 16-byte aligned (scalar shrink on a shape that would take the vector path).
  cases.push_back({576, 192, 24, 9, {{13, 3, 1.0f}, {24, 5, 0.25f}}, 1});
  // The largest rank: the expand's shared memory past 48 KB.
  cases.push_back({1000, 300, 256, 11, {{256, 4, 1.0f}, {0, 2, 1.0f}, {131, 3, 2.0f}}, 0});
  // Rank 1, one slot, one row.
  cases.push_back({4096, 1024, 1, 5, {{1, 1, 3.0f}}, 0});
  // Ranks past 8 that are no multiple of 8 with R a multiple of 8, out no multiple of 128.
  cases.push_back({4096, 1000, 64, 20, {{33, 6, 1.0f}, {57, 6, 1.0f}, {9, 6, 1.0f}}, 0});
  uint32_t seed = 100;
  for (const LoraCase& lc : cases) run_case(*g, *c, lc, seed++);
}

TEST(CudaLora, ManyRowsPerSlotMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  // 2050 rows: 64 row CTAs per slot, each several tiles of rows.
  run_case(*g, *c, {576, 192, 16, 2100, {{16, 1500, 1.0f}, {9, 500, 2.0f}, {0, 50, 1.0f}}, 0}, 300);
  // A prompt chunk of one adapter.
  run_case(*g, *c, {4096, 1024, 64, 300, {{64, 300, 0.5f}}, 0}, 301);
  // Decode of 64 sequences over 8 adapters (the performance target's shape).
  LoraCase dec{4096, 14336, 64, 64, {}, 0};
  for (int s = 0; s < 8; ++s) dec.slots.push_back({64, 8, 1.0f});
  run_case(*g, *c, dec, 302);
}

TEST(CudaLora, SlotStorageIsBf16WithZeroPadding) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t S = 2, R = 16, in = 40, out = 24, rank = 5;
  auto w = g->alloc_lora_module(S, R, in, out);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->dtype, DType::kBF16);
  // A full-rank slot first, then rank 5 over it: the columns past 5 must be zero again.
  const auto a16 = random_floats(static_cast<size_t>(R * in), 5, 1.0f);
  const auto b16 = random_floats(static_cast<size_t>(out * R), 6, 1.0f);
  ASSERT_TRUE(g->set_lora_slot(*w, 1, a16.data(), b16.data(), R, 1.0f).ok());
  const auto a = random_floats(static_cast<size_t>(rank * in), 7, 1.0f);
  const auto b = random_floats(static_cast<size_t>(out * rank), 8, 1.0f);
  const float scale = 0.3f;
  ASSERT_TRUE(g->set_lora_slot(*w, 1, a.data(), b.data(), rank, scale).ok());
  EXPECT_EQ(w->host_rank, (std::vector<int32_t>{0, static_cast<int32_t>(rank)}));
  std::vector<uint16_t> ga(static_cast<size_t>(S * R * in)), gb(static_cast<size_t>(S * out * R));
  std::vector<int32_t> gr(S);
  ASSERT_TRUE(g->copy_to_host(ga.data(), w->a, ga.size() * 2).ok());
  ASSERT_TRUE(g->copy_to_host(gb.data(), w->b, gb.size() * 2).ok());
  ASSERT_TRUE(g->copy_to_host(gr.data(), w->slot_rank, gr.size() * 4).ok());
  EXPECT_EQ(gr, (std::vector<int32_t>{0, static_cast<int32_t>(rank)}));
  std::vector<uint16_t> wa(ga.size(), 0), wb(gb.size(), 0);
  for (int64_t j = 0; j < rank; ++j)
    for (int64_t i = 0; i < in; ++i) wa[static_cast<size_t>((R + j) * in + i)] = f32_to_bf16(a[j * in + i]);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < rank; ++j)
      wb[static_cast<size_t>((out + o) * R + j)] = f32_to_bf16(scale * b[o * rank + j]);
  EXPECT_EQ(ga, wa);
  EXPECT_EQ(gb, wb);
  // Emptying the slot zeroes it.
  ASSERT_TRUE(g->set_lora_slot(*w, 1, nullptr, nullptr, 0, 0.0f).ok());
  ASSERT_TRUE(g->copy_to_host(ga.data(), w->a, ga.size() * 2).ok());
  ASSERT_TRUE(g->copy_to_host(gb.data(), w->b, gb.size() * 2).ok());
  ASSERT_TRUE(g->copy_to_host(gr.data(), w->slot_rank, gr.size() * 4).ok());
  EXPECT_TRUE(std::all_of(ga.begin(), ga.end(), [](uint16_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(gb.begin(), gb.end(), [](uint16_t v) { return v == 0; }));
  EXPECT_EQ(gr, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(w->host_rank, (std::vector<int32_t>{0, 0}));
  // Bad arguments are refused.
  EXPECT_FALSE(g->set_lora_slot(*w, 2, a.data(), b.data(), rank, 1.0f).ok());
  EXPECT_FALSE(g->set_lora_slot(*w, 0, a16.data(), b16.data(), R + 1, 1.0f).ok());
  EXPECT_FALSE(g->set_lora_slot(*w, 0, nullptr, nullptr, 2, 1.0f).ok());
  EXPECT_FALSE(g->alloc_lora_module(2, 257, in, out).ok());
  EXPECT_FALSE(g->alloc_lora_module(0, 8, in, out).ok());
  ASSERT_TRUE(g->synchronize().ok());
}

TEST(CudaLora, CapturedGraphFollowsTheSegments) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  ASSERT_TRUE(g->supports_graphs());
  // Three slots, 12 rows at most (the captured bound) of 16 tokens.
  const LoraCase lc{576, 192, 16, 16, {{16, 4, 1.0f}, {5, 4, 2.0f}, {11, 4, 0.5f}}, 0};
  LoraProblem p = make_problem(lc, 400);
  GpuLora d;
  setup_gpu(*g, p, 12, &d);
  ASSERT_FALSE(HasFatalFailure());
  // Eagerly once (the first launch sets the kernels' attributes), then captured.
  ASSERT_TRUE(gpu_apply(*g, p, d).ok());
  ASSERT_TRUE(g->synchronize().ok());
  ASSERT_TRUE(g->begin_capture().ok());
  ASSERT_TRUE(gpu_apply(*g, p, d).ok());
  auto graph = g->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  // Other rows and segments in the same buffers: fewer rows than the bound (the rest -1, never
  // read), an empty slot, every row in one slot.
  std::vector<int32_t> order(16);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(401));
  struct Step {
    std::vector<int32_t> slot_start;
    int32_t used;
  };
  const Step steps[] = {{{0, 4, 8, 12}, 12}, {{0, 1, 1, 6}, 6}, {{0, 0, 12, 12}, 12}, {{0, 2, 3, 3}, 3}};
  for (size_t i = 0; i < std::size(steps); ++i) {
    const Step& s = steps[i];
    std::vector<int32_t> rows(order.begin() + static_cast<long>(i), order.begin() + static_cast<long>(i) + s.used);
    const std::vector<float> ref = cpu_result(*c, p, rows, s.slot_start);
    std::vector<int32_t> dev_rows(rows);
    dev_rows.resize(12, -1);
    ASSERT_TRUE(g->copy_to_device(d.rows.data(), dev_rows.data(), dev_rows.size() * 4).ok());
    ASSERT_TRUE(g->copy_to_device(d.slot_start.data(), s.slot_start.data(), s.slot_start.size() * 4).ok());
    ASSERT_TRUE(g->copy_to_device(d.y.data(), p.y0.data(), p.y0.size() * 4).ok());
    ASSERT_TRUE(g->launch_graph(**graph).ok());
    const Status st = g->synchronize();
    ASSERT_TRUE(st.ok()) << "replay " << i << ": " << st.to_string();
    expect_lora_match(to_host<float>(*g, d.y, p.y0.size()), ref, p, adapted_tokens(p, rows, s.slot_start),
                      "graph replay " + std::to_string(i));
  }
}

// A row's output is the same bits in any step: alone, with other rows of its slot in another
// order, or beside more rows (the kernels' K split and accumulation order do not depend on the
// step's rows, only on the shapes and slots).
TEST(CudaLora, RowsGiveTheSameBitsInAnyStep) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  // 8 slots of 8 rows (decode at batch 64), 16 more tokens.
  LoraCase lc{4096, 1024, 64, 80, {}, 0};
  for (int s = 0; s < 8; ++s) lc.slots.push_back({64, 8, 1.0f});
  const LoraProblem p = make_problem(lc, 450);
  GpuLora d;
  setup_gpu(*g, p, 80, &d);
  ASSERT_FALSE(HasFatalFailure());
  const size_t out = static_cast<size_t>(lc.out);
  // y after one step of the rows and segments given.
  auto run = [&](const std::vector<int32_t>& rows, const std::vector<int32_t>& slot_start) {
    std::vector<int32_t> dev_rows(rows);
    dev_rows.resize(80, -1);
    EXPECT_TRUE(g->copy_to_device(d.rows.data(), dev_rows.data(), dev_rows.size() * 4).ok());
    EXPECT_TRUE(g->copy_to_device(d.slot_start.data(), slot_start.data(), slot_start.size() * 4).ok());
    EXPECT_TRUE(g->copy_to_device(d.y.data(), p.y0.data(), p.y0.size() * 4).ok());
    LoraApplyArgs a = apply_args(d.x_ptr(), d.y.as<float>(), d.scratch.as<float>(), p, &d.w, d.rows.as<int32_t>(),
                                 d.slot_start.as<int32_t>(), static_cast<int64_t>(rows.size()));
    EXPECT_TRUE(g->lora_apply(a).ok());
    EXPECT_TRUE(g->synchronize().ok());
    return to_host<float>(*g, d.y, p.y0.size());
  };
  const std::vector<float> full = run(p.rows, p.slot_start);
  expect_lora_match(full, cpu_result(*c, p, p.rows, p.slot_start), p, adapted_tokens(p, p.rows, p.slot_start),
                    "8 x 8 rows");
  auto expect_same = [&](const std::vector<float>& got, const std::vector<int32_t>& tokens, const std::string& what) {
    for (int32_t t : tokens)
      for (size_t o = 0; o < out; ++o)
        ASSERT_EQ(f32_to_bits(got[t * out + o]), f32_to_bits(full[t * out + o]))
            << what << ": token " << t << " output " << o;
  };
  // Slot 3's rows alone, in reverse order (each row at another place in its tile).
  std::vector<int32_t> rows3(p.rows.begin() + p.slot_start[3], p.rows.begin() + p.slot_start[4]);
  std::reverse(rows3.begin(), rows3.end());
  std::vector<int32_t> ss3(9, 0);
  for (int s = 4; s <= 8; ++s) ss3[static_cast<size_t>(s)] = 8;
  expect_same(run(rows3, ss3), rows3, "slot 3 alone, reversed");
  // The 16 unused tokens join slot 0: 80 rows, more than 8 per slot on average.
  std::vector<int32_t> more, used(p.rows);
  std::sort(used.begin(), used.end());
  for (int32_t t = 0; t < 80; ++t)
    if (!std::binary_search(used.begin(), used.end(), t)) more.push_back(t);
  ASSERT_EQ(more.size(), 16u);
  std::vector<int32_t> rows80(p.rows.begin(), p.rows.begin() + 8);
  rows80.insert(rows80.end(), more.begin(), more.end());
  rows80.insert(rows80.end(), p.rows.begin() + 8, p.rows.end());
  std::vector<int32_t> ss80(p.slot_start);
  for (size_t s = 1; s < ss80.size(); ++s) ss80[s] += 16;
  const std::vector<int32_t> others(p.rows.begin() + 8, p.rows.end());
  expect_same(run(rows80, ss80), others, "beside 16 more rows");
}

TEST(CudaLora, BadRowsAreReportedAtSynchronize) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const LoraCase lc{64, 32, 8, 6, {{8, 2, 1.0f}, {4, 2, 1.0f}}, 0};
  LoraProblem p = make_problem(lc, 500);
  GpuLora d;
  setup_gpu(*g, p, 4, &d);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(gpu_apply(*g, p, d).ok());
  ASSERT_TRUE(g->synchronize().ok());
  // A token past the step's.
  std::vector<int32_t> rows(p.rows);
  rows[1] = 6;
  ASSERT_TRUE(g->copy_to_device(d.rows.data(), rows.data(), rows.size() * 4).ok());
  ASSERT_TRUE(gpu_apply(*g, p, d).ok());
  EXPECT_FALSE(g->synchronize().ok());
  EXPECT_TRUE(g->synchronize().ok());  // reported once
  // Segments past the step's rows, or decreasing.
  ASSERT_TRUE(g->copy_to_device(d.rows.data(), p.rows.data(), p.rows.size() * 4).ok());
  for (const std::vector<int32_t>& ss : {std::vector<int32_t>{0, 3, 5}, std::vector<int32_t>{0, 3, 2}}) {
    ASSERT_TRUE(g->copy_to_device(d.slot_start.data(), ss.data(), ss.size() * 4).ok());
    ASSERT_TRUE(gpu_apply(*g, p, d).ok());
    EXPECT_FALSE(g->synchronize().ok());
  }
  // Modules of another backend and missing pieces are refused on the host.
  auto c = cpu_reference();
  ASSERT_TRUE(c);
  auto wc = c->alloc_lora_module(2, 8, 64, 32);
  ASSERT_TRUE(wc.ok());
  LoraApplyArgs a = apply_args(d.x_ptr(), d.y.as<float>(), d.scratch.as<float>(), p, &*wc, d.rows.as<int32_t>(),
                               d.slot_start.as<int32_t>(), 4);
  EXPECT_FALSE(g->lora_apply(a).ok());
  a.w = &d.w;
  a.scratch = nullptr;
  EXPECT_FALSE(g->lora_apply(a).ok());
  a.scratch = d.scratch.as<float>();
  a.rows.num_slots = 3;
  EXPECT_FALSE(g->lora_apply(a).ok());
  ASSERT_TRUE(g->synchronize().ok());
}

// ---- lora_apply_multi ----

// Modules of one input: the step's rows (rows per slot) are shared, each module has its own
// output features, max rank and slot ranks (rank 0: the module leaves the slot's rows alone).
struct MultiModule {
  int64_t out = 0, R = 0;
  std::vector<int64_t> ranks;  // per slot
};

struct MultiCase {
  int64_t in = 0, num_tokens = 0;
  std::vector<int64_t> slot_rows;
  std::vector<MultiModule> mods;
  int64_t x_offset = 0;
};

// One LoraProblem per module, all of the same seed: the same x and rows (make_problem draws them
// from the seed, the token count, in and the slots' rows alone); factors and y drawn again per
// module, so that no module's factors are a prefix of another's.
std::vector<LoraProblem> make_multi(const MultiCase& mc, uint32_t seed) {
  std::vector<LoraProblem> ps;
  for (size_t k = 0; k < mc.mods.size(); ++k) {
    const MultiModule& m = mc.mods[k];
    LoraCase c{mc.in, m.out, m.R, mc.num_tokens, {}, mc.x_offset};
    for (size_t s = 0; s < mc.slot_rows.size(); ++s)
      c.slots.push_back({m.ranks[s], mc.slot_rows[s], 0.5f + 0.25f * static_cast<float>(s % 4)});
    LoraProblem p = make_problem(c, seed);
    const uint32_t ms = seed + 7919 * static_cast<uint32_t>(k + 1);
    for (size_t s = 0; s < p.a.size(); ++s) {
      p.a[s] = random_floats(p.a[s].size(), ms + 10 * static_cast<uint32_t>(s) + 1, 0.05f);
      p.b[s] = random_floats(p.b[s].size(), ms + 10 * static_cast<uint32_t>(s) + 2, 0.05f);
    }
    p.y0 = random_floats(p.y0.size(), ms + 2000, 1.0f);
    EXPECT_EQ(p.x, ps.empty() ? p.x : ps.front().x);
    EXPECT_EQ(p.rows, ps.empty() ? p.rows : ps.front().rows);
    ps.push_back(std::move(p));
  }
  return ps;
}

std::string describe(const MultiCase& mc) {
  std::string s = "in=" + std::to_string(mc.in) + " tokens=" + std::to_string(mc.num_tokens) + " rows:";
  for (int64_t r : mc.slot_rows) s += " " + std::to_string(r);
  for (const MultiModule& m : mc.mods) {
    s += " | out=" + std::to_string(m.out) + " R=" + std::to_string(m.R) + " ranks:";
    for (int64_t r : m.ranks) s += " " + std::to_string(r);
  }
  return s;
}

// The modules on the GPU: module 0's x, rows and segments serve every module (share_x false:
// every module reads its own copy of x, so no two share a launch).
struct GpuMulti {
  std::vector<GpuLora> d;
  std::vector<LoraApplyArgs> args(const std::vector<LoraProblem>& ps, bool share_x) {
    std::vector<LoraApplyArgs> as;
    for (size_t k = 0; k < d.size(); ++k)
      as.push_back(apply_args(share_x ? d[0].x_ptr() : d[k].x_ptr(), d[k].y.as<float>(), d[k].scratch.as<float>(),
                              ps[k], &d[k].w, d[0].rows.as<int32_t>(), d[0].slot_start.as<int32_t>(), d[0].num_rows));
    return as;
  }
};

void setup_multi(Backend& g, const std::vector<LoraProblem>& ps, int64_t num_rows, GpuMulti* m) {
  m->d.resize(ps.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    setup_gpu(g, ps[k], num_rows, &m->d[k]);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void run_multi(Backend& g, Backend& c, const MultiCase& mc, uint32_t seed, bool share_x = true) {
  const std::string what = describe(mc) + (share_x ? "" : " (x not shared)");
  const std::vector<LoraProblem> ps = make_multi(mc, seed);
  GpuMulti m;
  setup_multi(g, ps, static_cast<int64_t>(ps[0].rows.size()), &m);
  ASSERT_FALSE(::testing::Test::HasFatalFailure()) << what;
  const std::vector<LoraApplyArgs> args = m.args(ps, share_x);
  const Status st = g.lora_apply_multi(args);
  ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
  ASSERT_TRUE(g.synchronize().ok()) << what;
  for (size_t k = 0; k < ps.size(); ++k) {
    const LoraProblem& p = ps[k];
    const std::vector<float> ref = cpu_result(c, p, p.rows, p.slot_start);
    expect_lora_match(to_host<float>(g, m.d[k].y, p.y0.size()), ref, p, adapted_tokens(p, p.rows, p.slot_start),
                      what + ": module " + std::to_string(k));
  }
}

TEST(CudaLoraMulti, QkvMatchesCpuPerModule) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  // Llama-3-8B's q, k and v: slots of rank 64, 0, odd, and one without rows; module k empties
  // slot 0, module v has another max rank.
  MultiCase llama{4096, 40, {6, 4, 9, 0, 5}, {}, 0};
  llama.mods = {{4096, 64, {64, 0, 37, 64, 8}}, {1024, 64, {0, 0, 64, 16, 21}}, {1024, 32, {32, 0, 5, 32, 32}}};
  run_multi(*g, *c, llama, 600);
  run_multi(*g, *c, llama, 601, /*share_x=*/false);
  // Odd input features (scalar shrink) and ranks; a fourth module takes a second launch pair.
  MultiCase odd{579, 17, {3, 5, 0, 6}, {}, 0};
  odd.mods = {{192, 16, {16, 7, 3, 0}}, {64, 16, {0, 16, 9, 16}}, {64, 8, {5, 0, 8, 1}}, {77, 5, {5, 3, 2, 5}}};
  run_multi(*g, *c, odd, 602);
  // Unaligned x on a shape that would take the vector path.
  MultiCase unaligned{576, 9, {4, 5}, {{192, 24, {13, 24}}, {64, 24, {24, 0}}}, 1};
  run_multi(*g, *c, unaligned, 603);
  // Decode of 64 sequences over 8 adapters of rank 64 (the performance target's shape).
  MultiCase dec{4096, 64, std::vector<int64_t>(8, 8), {}, 0};
  for (int64_t out : {4096, 1024, 1024}) dec.mods.push_back({out, 64, std::vector<int64_t>(8, 64)});
  run_multi(*g, *c, dec, 604);
}

TEST(CudaLoraMulti, PrefillRowsMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  // 2150 rows of 2200 tokens over four slots (one of rank 0 in one module): many row CTAs per
  // slot, several tiles of rows each.
  MultiCase pre{1024, 2200, {1300, 700, 150, 0}, {}, 0};
  pre.mods = {{1024, 64, {64, 32, 0, 64}}, {256, 64, {64, 0, 17, 64}}, {256, 64, {48, 32, 64, 64}}};
  run_multi(*g, *c, pre, 700);
}

TEST(CudaLoraMulti, CapturedGraphFollowsTheSegments) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  ASSERT_TRUE(g->supports_graphs());
  // Three slots, 12 rows at most (the captured bound) of 16 tokens, three modules.
  MultiCase mc{1024, 16, {4, 4, 4}, {}, 0};
  mc.mods = {{512, 16, {16, 5, 11}}, {128, 16, {0, 16, 3}}, {128, 8, {8, 8, 0}}};
  const std::vector<LoraProblem> ps = make_multi(mc, 800);
  GpuMulti m;
  setup_multi(*g, ps, 12, &m);
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<LoraApplyArgs> args = m.args(ps, /*share_x=*/true);
  // Eagerly once (the first launch sets the kernels' attributes), then captured.
  ASSERT_TRUE(g->lora_apply_multi(args).ok());
  ASSERT_TRUE(g->synchronize().ok());
  ASSERT_TRUE(g->begin_capture().ok());
  ASSERT_TRUE(g->lora_apply_multi(args).ok());
  auto graph = g->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  std::vector<int32_t> order(16);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(801));
  struct Step {
    std::vector<int32_t> slot_start;
    int32_t used;
  };
  const Step steps[] = {{{0, 4, 8, 12}, 12}, {{0, 1, 1, 6}, 6}, {{0, 0, 12, 12}, 12}, {{0, 2, 3, 3}, 3}};
  for (size_t i = 0; i < std::size(steps); ++i) {
    const Step& s = steps[i];
    std::vector<int32_t> rows(order.begin() + static_cast<long>(i), order.begin() + static_cast<long>(i) + s.used);
    std::vector<int32_t> dev_rows(rows);
    dev_rows.resize(12, -1);
    ASSERT_TRUE(g->copy_to_device(m.d[0].rows.data(), dev_rows.data(), dev_rows.size() * 4).ok());
    ASSERT_TRUE(g->copy_to_device(m.d[0].slot_start.data(), s.slot_start.data(), s.slot_start.size() * 4).ok());
    for (size_t k = 0; k < ps.size(); ++k)
      ASSERT_TRUE(g->copy_to_device(m.d[k].y.data(), ps[k].y0.data(), ps[k].y0.size() * 4).ok());
    ASSERT_TRUE(g->launch_graph(**graph).ok());
    const Status st = g->synchronize();
    ASSERT_TRUE(st.ok()) << "replay " << i << ": " << st.to_string();
    for (size_t k = 0; k < ps.size(); ++k) {
      const std::vector<float> ref = cpu_result(*c, ps[k], rows, s.slot_start);
      expect_lora_match(to_host<float>(*g, m.d[k].y, ps[k].y0.size()), ref, ps[k],
                        adapted_tokens(ps[k], rows, s.slot_start),
                        "graph replay " + std::to_string(i) + ", module " + std::to_string(k));
    }
  }
}

TEST(CudaLoraMulti, BadArgumentsAreRefused) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  MultiCase mc{64, 6, {2, 2}, {{32, 8, {8, 4}}, {16, 8, {0, 8}}}, 0};
  const std::vector<LoraProblem> ps = make_multi(mc, 900);
  GpuMulti m;
  setup_multi(*g, ps, 4, &m);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<LoraApplyArgs> args = m.args(ps, true);
  EXPECT_TRUE(g->lora_apply_multi({}).ok());
  ASSERT_TRUE(g->lora_apply_multi(args).ok());
  ASSERT_TRUE(g->synchronize().ok());
  // A bad module refuses the whole call before anything is launched.
  args[1].scratch = nullptr;
  EXPECT_FALSE(g->lora_apply_multi(args).ok());
  // A bad segment is reported at synchronize.
  args = m.args(ps, true);
  const std::vector<int32_t> ss{0, 3, 5};
  ASSERT_TRUE(g->copy_to_device(m.d[0].slot_start.data(), ss.data(), ss.size() * 4).ok());
  ASSERT_TRUE(g->lora_apply_multi(args).ok());
  EXPECT_FALSE(g->synchronize().ok());
  EXPECT_TRUE(g->synchronize().ok());
}

}  // namespace
}  // namespace lancet
