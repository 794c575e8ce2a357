// mnist-dp-cpu-bench: the CPU side of every op of a training step, at the training shapes (a replica's batch
// of 64, 32, 22 or 8 rows), with Google Benchmark:
//   ref/...    the reference ops (plain loops: the definition every other implementation is checked against)
//   cpu/...    the CPU training path: the products as cpu::gemm on feature-major activations
//              (kernels/cpu/linear.hpp), in the widest instruction set this CPU has
//   blas/...   the same layer through OpenBLAS (batch-major, the bias and ReLU fused into one pass after it)
//   step/...   a whole step from the ops (gather, forward, softmax cross-entropy, backward, SGD), with either
//   replica/.. and through CpuReplica, as the trainer runs it (one replica: no all-reduce)
//   host/...   the trainer's own host work: the epoch's shuffle
//
//   mnist-dp-cpu-bench [--threads=N] [Google Benchmark flags, e.g. --benchmark_filter=blas
//                       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//                       --benchmark_format=json --benchmark_out=FILE]
//
// --threads sets OpenBLAS's thread count for the blas/ rows (default 1); replica/cpu runs one thread, as
// mnist-dp's default --threads. Counters: FLOP/s from the
// products' 2mnk (plus the elementwise work, counted by hand), bytes_per_second from the least each op must
// move.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "host/cpu/cpu_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/ref/gather.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/sgd.hpp"
#include "kernels/ref/softmax_xent.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp::bench {
namespace {

constexpr int kIn = ParamLayout::kInput;
constexpr int kHid = ParamLayout::kHidden;
constexpr int kOut = ParamLayout::kClasses;
constexpr int kGlobalBatch = 64;
constexpr int kBatches[] = {64, 32, 22, 8};

std::size_t sz(long n) {
  return static_cast<std::size_t>(n);
}

std::vector<float> uniform(std::size_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

std::vector<std::uint8_t> labels(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& l : v)
    l = static_cast<std::uint8_t>(rng() % kOut);
  return v;
}

// Parameters as nn.Linear initialises them: U(-1/sqrt(in), 1/sqrt(in)).
std::vector<float> init_params(std::uint32_t seed) {
  std::vector<float> p(ParamLayout::kCount);
  const float r1 = 1.0f / std::sqrt(static_cast<float>(kIn)), r2 = 1.0f / std::sqrt(static_cast<float>(kHid));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d1(-r1, r1), d2(-r2, r2);
  for (std::size_t i = 0; i < ParamLayout::kFc2Weight; ++i)
    p[i] = d1(rng);
  for (std::size_t i = ParamLayout::kFc2Weight; i < ParamLayout::kCount; ++i)
    p[i] = d2(rng);
  return p;
}

// A random data set of MNIST's format, big enough that a batch's rows come from all over memory.
DataSplits random_data(int train, int test) {
  auto set = [](int count, std::uint32_t seed) {
    Dataset d;
    d.count = count;
    d.images.resize(sz(count) * kIn);
    std::mt19937 rng(seed);
    for (auto& p : d.images)
      p = static_cast<std::uint8_t>(rng() >> 24);
    d.labels = labels(sz(count), seed + 1);
    return d;
  };
  DataSplits s;
  s.train = set(train, 1);
  s.test = set(test, 2);
  s.name = "random";
  return s;
}

void set_rates(benchmark::State& st, double flops, double bytes) {
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  st.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(st.iterations()) * bytes));
}

enum class Impl { ref, blas, cpu };
const char* name(Impl i) {
  return i == Impl::ref ? "ref" : i == Impl::blas ? "blas" : "cpu";
}

// The layer as each implementation runs it. cpu:: keeps its activations feature-major: the buffers hold the
// same number of values, so the benchmarks below time it on the same (random) data, read in its own layout;
// its backward takes dy both ways (as the step has it) and needs a vector of ones and a scratch, made once
// here.
struct CpuScratch {
  std::vector<float> ones = std::vector<float>(4096, 1.0f);
  std::vector<float> dwT = std::vector<float>(sz(kIn) * kHid);
  std::vector<float> dyT = std::vector<float>(sz(4096) * kHid);
};

void forward(Impl impl, const float* x, const float* w, const float* b, float* y, LinearShape s, bool relu) {
  const Activation act = relu ? Activation::relu : Activation::identity;
  if (impl == Impl::ref)
    ref::linear_forward(x, w, b, y, s, act);
  else if (impl == Impl::blas)
    blas::linear_forward(x, w, b, y, s, act);
  else
    cpu::linear_forward(cpu::best_isa(), w, b, x, y, s, act);
}

// With dx (fc2): both weight-gradient forms' work as the step does it (the transposed one, from x
// feature-major), and dx feature-major with the mask; without (fc1): the weight gradient from dy
// feature-major.
void backward(Impl impl, const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
              LinearShape s, bool mask) {
  const Activation act = mask ? Activation::relu : Activation::identity;
  if (impl == Impl::ref) {
    ref::linear_backward(dy, x, w, dw, db, dx, s, act);
  } else if (impl == Impl::blas) {
    blas::linear_backward(dy, x, w, dw, db, dx, s, act);
  } else {
    static CpuScratch scratch;
    const cpu::Isa isa = cpu::best_isa();
    if (dx != nullptr) {
      cpu::weight_gradient_from_transposed(isa, x, dy, scratch.ones.data(), scratch.dwT.data(), dw, db, s);
      cpu::transpose(isa, dy, scratch.dyT.data(), s.batch, s.out);
      cpu::input_gradient(isa, w, scratch.dyT.data(), x, nullptr, dx, s, act);
    } else {
      cpu::weight_gradient(isa, dy, x, scratch.ones.data(), dw, db, s);
    }
  }
}

// y = x w^T + b (ReLU on fc1): 2 B in out flops, plus the bias (and ReLU) per output.
void bm_forward(benchmark::State& st, Impl impl, LinearShape s, bool relu) {
  const auto x = uniform(sz(s.batch) * sz(s.in), -1.0f, 1.0f, 1);
  const auto w = uniform(sz(s.out) * sz(s.in), -0.05f, 0.05f, 2);
  const auto b = uniform(sz(s.out), -0.05f, 0.05f, 3);
  std::vector<float> y(sz(s.batch) * sz(s.out));
  for (auto _ : st) {
    forward(impl, x.data(), w.data(), b.data(), y.data(), s, relu);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double out = static_cast<double>(s.batch) * s.out;
  set_rates(st, 2.0 * out * s.in + out * (relu ? 2 : 1),
            4.0 * (static_cast<double>(s.batch) * s.in + static_cast<double>(s.out) * s.in + s.out + out));
}

// dw = dy^T x, db = column sums of dy, and (fc2) dx = dy w times the ReLU mask.
void bm_backward(benchmark::State& st, Impl impl, LinearShape s, bool with_dx) {
  const auto dy = uniform(sz(s.batch) * sz(s.out), -0.02f, 0.02f, 4);
  const auto x = uniform(sz(s.batch) * sz(s.in), -1.0f, 1.0f, 5);
  const auto w = uniform(sz(s.out) * sz(s.in), -0.05f, 0.05f, 6);
  std::vector<float> dw(sz(s.out) * sz(s.in)), db(sz(s.out)), dx(with_dx ? sz(s.batch) * sz(s.in) : 0);
  for (auto _ : st) {
    backward(impl, dy.data(), x.data(), w.data(), dw.data(), db.data(), with_dx ? dx.data() : nullptr, s,
             with_dx);
    benchmark::DoNotOptimize(dw.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  const double bsz = s.batch, in = s.in, out = s.out;
  double flops = 2.0 * bsz * in * out + bsz * out;
  double bytes = 4.0 * (bsz * out + bsz * in + out * in + out);
  if (with_dx) {
    flops += 2.0 * bsz * in * out + bsz * in;
    bytes += 4.0 * (out * in + bsz * in);
  }
  set_rates(st, flops, bytes);
}

void bm_softmax_xent(benchmark::State& st, int batch) {
  const auto logits = uniform(sz(batch) * kOut, -4.0f, 4.0f, 7);
  const auto y = labels(sz(batch), 8);
  std::vector<float> d(sz(batch) * kOut);
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        ref::softmax_xent(logits.data(), y.data(), d.data(), batch, kOut, 1.0f / kGlobalBatch));
    benchmark::ClobberMemory();
  }
  set_rates(st, 6.0 * batch * kOut, 8.0 * batch * kOut + batch + 4);
}

void bm_count_correct(benchmark::State& st, int batch) {
  const auto logits = uniform(sz(batch) * kOut, -4.0f, 4.0f, 9);
  const auto y = labels(sz(batch), 10);
  for (auto _ : st)
    benchmark::DoNotOptimize(ref::count_correct(logits.data(), y.data(), batch, kOut));
  set_rates(st, 1.0 * batch * kOut, 4.0 * batch * kOut + batch);
}

void bm_gather(benchmark::State& st, const DataSplits& data, int batch) {
  std::vector<std::int32_t> order(sz(data.train.count));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  std::vector<float> x(sz(batch) * kIn);
  std::vector<std::uint8_t> y(sz(batch));
  const int steps = data.train.count / batch;
  long i = 0;
  for (auto _ : st) {
    ref::gather_normalize(data.train.images.data(), data.train.labels.data(),
                          order.data() + sz(i++ % steps) * sz(batch), x.data(), y.data(), batch, kIn);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  set_rates(st, 3.0 * batch * kIn, 5.0 * batch * kIn + 6.0 * batch);
}

void bm_sgd(benchmark::State& st, bool momentum) {
  const std::size_t n = ParamLayout::kCount;
  auto p = uniform(n, -0.05f, 0.05f, 12);
  const auto g = uniform(n, -0.01f, 0.01f, 13);
  std::vector<float> m(n, 0.0f);
  SgdConfig cfg;
  cfg.momentum = momentum ? 0.9f : 0.0f;
  for (auto _ : st) {
    ref::sgd_step(p.data(), g.data(), momentum ? m.data() : nullptr, n, cfg, false);
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  const double dn = static_cast<double>(n);
  set_rates(st, momentum ? 4.0 * dn : 2.0 * dn, momentum ? 20.0 * dn : 12.0 * dn);
}

// Work of one step of `batch` rows, counted as the sum of its ops above.
void step_rates(benchmark::State& st, int batch) {
  const double b = batch, in = kIn, hid = kHid, out = kOut, n = static_cast<double>(ParamLayout::kCount);
  const double flops = 3.0 * b * in                               // gather
                       + 2.0 * b * in * hid + 2.0 * b * hid       // fc1 forward, bias, ReLU
                       + 2.0 * b * hid * out + b * out            // fc2 forward, bias
                       + 6.0 * b * out                            // softmax cross-entropy
                       + 4.0 * b * hid * out + b * out + b * hid  // fc2 dW, db, dX with mask
                       + 2.0 * b * in * hid + b * hid             // fc1 dW, db
                       + 2.0 * n;                                 // SGD
  const double bytes = 5.0 * b * in + 4.0 * (n + ParamLayout::kGradCount) + 12.0 * n +
                       4.0 * (3.0 * b * in + 4.0 * b * hid + 4.0 * b * out);
  set_rates(st, flops, bytes);
}

// One step of `batch` rows (of a global batch of 64) from the ops directly, as CpuReplica runs them.
void bm_step_ops(benchmark::State& st, Impl impl, const DataSplits& data, int batch) {
  auto params = init_params(14);
  std::vector<float> grads(ParamLayout::kGradCount), x(sz(batch) * kIn), h(sz(batch) * kHid),
      dh(sz(batch) * kHid), logits(sz(batch) * kOut), dlogits(sz(batch) * kOut);
  std::vector<std::uint8_t> y(sz(batch));
  std::vector<std::int32_t> order(sz(data.train.count));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(15));
  const int steps = data.train.count / batch;
  const SgdConfig sgd;
  long i = 0;
  for (auto _ : st) {
    const auto w = ParamViews<const float>::of(params.data());
    const auto g = ParamViews<float>::of(grads.data());
    ref::gather_normalize(data.train.images.data(), data.train.labels.data(),
                          order.data() + sz(i++ % steps) * sz(batch), x.data(), y.data(), batch, kIn);
    forward(impl, x.data(), w.fc1_weight, w.fc1_bias, h.data(), {batch, kIn, kHid}, true);
    forward(impl, h.data(), w.fc2_weight, w.fc2_bias, logits.data(), {batch, kHid, kOut}, false);
    grads[ParamLayout::kLossSlot] =
        ref::softmax_xent(logits.data(), y.data(), dlogits.data(), batch, kOut, 1.0f / kGlobalBatch);
    backward(impl, dlogits.data(), h.data(), w.fc2_weight, g.fc2_weight, g.fc2_bias, dh.data(),
             {batch, kHid, kOut}, true);
    backward(impl, dh.data(), x.data(), w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr, {batch, kIn, kHid},
             false);
    ref::sgd_step(params.data(), grads.data(), nullptr, ParamLayout::kCount, sgd, false);
    benchmark::ClobberMemory();
  }
  step_rates(st, batch);
}

// The trainer's host work once an epoch: the seeded permutation of a training set of `rows` (the GPU path
// makes it while the device runs the epoch before; this says how much time it has to hide).
void bm_epoch_order(benchmark::State& st, int rows) {
  std::vector<std::int32_t> order(sz(rows));
  int epoch = 0;
  for (auto _ : st) {
    epoch_order(order, 0, epoch++);
    benchmark::DoNotOptimize(order.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * rows);
}

// The same step through CpuReplica, the trainer's CPU replica: compute_gradients, then sgd_step.
void bm_step_replica(benchmark::State& st, const DataSplits& data, int batch) {
  CpuReplica replica(data, 0);
  replica.load_parameters(init_params(16));
  std::vector<std::int32_t> order(sz(data.train.count));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(17));
  replica.set_epoch_order(order);
  const int steps = data.train.count / batch;
  const SgdConfig sgd;
  long i = 0;
  for (auto _ : st) {
    replica.compute_gradients(static_cast<int>(i++ % steps) * batch, batch, kGlobalBatch);
    replica.sgd_step(sgd);
    benchmark::ClobberMemory();
  }
  step_rates(st, batch);
}

std::string read_loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "unknown" : one;
}

void register_all(const DataSplits& data) {
  using benchmark::RegisterBenchmark;
  auto reg = [](const std::string& n, std::function<void(benchmark::State&)> f) {
    // Wall-clock time, and the process's CPU time (OpenBLAS's own threads included) beside it.
    RegisterBenchmark(n.c_str(), [f](benchmark::State& st) { f(st); })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  };
  for (const Impl impl : {Impl::ref, Impl::blas, Impl::cpu}) {
    for (const int b : kBatches) {
      auto id = [&](const char* op) { return fmt::format("{}/{}/{}", name(impl), op, b); };
      reg(id("fc1.fwd"), [=](benchmark::State& st) { bm_forward(st, impl, {b, kIn, kHid}, true); });
      reg(id("fc2.fwd"), [=](benchmark::State& st) { bm_forward(st, impl, {b, kHid, kOut}, false); });
      reg(id("fc2.bwd"), [=](benchmark::State& st) { bm_backward(st, impl, {b, kHid, kOut}, true); });
      reg(id("fc1.bwd"), [=](benchmark::State& st) { bm_backward(st, impl, {b, kIn, kHid}, false); });
    }
  }
  for (const int b : kBatches) {
    reg(fmt::format("ref/softmax_xent/{}", b), [=](benchmark::State& st) { bm_softmax_xent(st, b); });
    reg(fmt::format("ref/count_correct/{}", b), [=](benchmark::State& st) { bm_count_correct(st, b); });
    reg(fmt::format("ref/gather/{}", b), [&data, b](benchmark::State& st) { bm_gather(st, data, b); });
  }
  reg("ref/sgd/plain", [](benchmark::State& st) { bm_sgd(st, false); });
  reg("ref/sgd/momentum", [](benchmark::State& st) { bm_sgd(st, true); });
  reg("host/epoch_order/60000", [](benchmark::State& st) { bm_epoch_order(st, 60000); });
  for (const int b : kBatches) {
    reg(fmt::format("step/ref/{}", b),
        [&data, b](benchmark::State& st) { bm_step_ops(st, Impl::ref, data, b); });
    reg(fmt::format("step/blas/{}", b),
        [&data, b](benchmark::State& st) { bm_step_ops(st, Impl::blas, data, b); });
    reg(fmt::format("replica/cpu/{}", b), [&data, b](benchmark::State& st) { bm_step_replica(st, data, b); });
  }
}

int run(int argc, char** argv) {
  // Our one flag, taken out before Google Benchmark reads the rest.
  int threads = 1;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
      if (threads < 1 || threads > 1024) {
        std::fprintf(stderr, "mnist-dp-cpu-bench: --threads=%s: want a whole number from 1 to 1024\n",
                     argv[i] + 10);
        return 2;
      }
      continue;
    }
    rest.push_back(argv[i]);
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;

  blas::set_threads(threads);
  const std::string core = openblas_get_corename();
  benchmark::AddCustomContext("openblas_core", core);
  benchmark::AddCustomContext("openblas_threads", std::to_string(threads));
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas_coretype_env", coretype ? coretype : "(unset)");
  const std::string load_before = read_loadavg();
  benchmark::AddCustomContext("load_average_1min_before", load_before);
  benchmark::AddCustomContext("cpu_gemm_isa", cpu::isa_name(cpu::best_isa()));
  if (__builtin_cpu_supports("avx512f") && (core == "Prescott" || core == "Core2" || core == "Nehalem"))
    std::fprintf(
        stderr,
        "mnist-dp-cpu-bench: note: OpenBLAS runs its %s kernels on this AVX-512 CPU (it did not recognise "
        "the model); OPENBLAS_CORETYPE=SkylakeX selects the AVX-512 ones\n",
        core.c_str());

  const DataSplits data = random_data(8192, 1024);
  register_all(data);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fprintf(stderr, "mnist-dp-cpu-bench: load average (1 min) before %s, after %s\n", load_before.c_str(),
               read_loadavg().c_str());
  return 0;
}

}  // namespace
}  // namespace mnistdp::bench

int main(int argc, char** argv) {
  try {
    return mnistdp::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-dp-cpu-bench: %s\n", e.what());
    return 1;
  }
}
