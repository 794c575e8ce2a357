// mnist-dp-gemm-survey: the five matrix products of one CPU training step, timed in one library at a time, in
// every layout the step could store its operands in. It is how the CPU path's library was chosen
// (docs/benchmarks.md, "Choosing the CPU's matrix library"); bench/gemm_survey.sh runs it once per library,
// each in a process of its own, since OpenBLAS, BLIS and MKL export the same cblas_sgemm.
//
// The libraries with a CBLAS interface are opened with dlopen, so that the program builds and runs whatever
// is installed, and says which are not.
#include <dlfcn.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <immintrin.h>

#include "bench/bench_stats.hpp"
#include "host/cpu/cache_aligned.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/ref/sgd.hpp"

#if defined(MNISTDP_SURVEY_DNNL)
#include <dnnl.h>
#endif
#if defined(MNISTDP_SURVEY_XSMM)
#include <libxsmm.h>
#endif

namespace {

using mnistdp::bench::Stats;

// Every operand starts a cache line, as the CPU replica's buffers do (host/cpu/cache_aligned.hpp): each
// library then reads and writes rows as it would in a step.
using Buffer = mnistdp::CacheAlignedVector<float>;

// A row-major product C[m,n] = op(A)[m,k] op(B)[k,n], as cblas_sgemm with CblasRowMajor takes it.
struct Product {
  std::string name;  // "fc1.fwd"
  int m, n, k;
  bool trans_a, trans_b;
  double flops() const { return 2.0 * m * n * k; }
};

// The products of one step at `batch` rows, each in the layouts its operands could be stored in. The first of
// each group is the layout the parameters and activations have in PyTorch's order (weights [out, in]).
std::vector<Product> step_products(int batch) {
  const int in = 784, hidden = 256, classes = 10;
  return {
      {"fc1.fwd x.w1T", batch, hidden, in, false, true},  // w1 as [256, 784]
      {"fc1.fwd x.w1", batch, hidden, in, false, false},  // w1 kept as [784, 256]
      {"fc2.fwd h.w2T", batch, classes, hidden, false, true},
      {"fc2.fwd h.w2", batch, classes, hidden, false, false},
      {"fc2.dW dlT.h", classes, hidden, batch, true, false},   // [10, 256]
      {"fc2.dWT hT.dl", hidden, classes, batch, true, false},  // [256, 10]
      {"fc2.dX dl.w2", batch, hidden, classes, false, false},
      {"fc2.dX dl.w2T", batch, hidden, classes, false, true},
      {"fc1.dW dHT.x", hidden, in, batch, true, false},   // [256, 784]
      {"fc1.dWT xT.dH", in, hidden, batch, true, false},  // [784, 256]
      {"fc1.dW dHT.xT", hidden, in, batch, true, true},   // x gathered transposed, [784, batch]
      // Activations feature-major ([features, rows]), weights as PyTorch stores them: the form of
      // kernels/cpu/linear.hpp, in which A is always broadcast and B read by rows.
      {"fm fc1.fwd w1.xT", hidden, batch, in, false, false},
      {"fm fc2.fwd w2.hT", classes, batch, hidden, false, false},
      {"fm fc2.dWT hT.dl", hidden, classes, batch, false, false},
      {"fm fc2.dX w2T.dlT", hidden, batch, classes, true, false},
      {"fm fc1.dW dHT.x", hidden, in, batch, false, false},
  };
}

using Sgemm = std::function<void(const Product&, const float* a, const float* b, float* c)>;

int ld_a(const Product& p) {
  return p.trans_a ? p.m : p.k;
}
int ld_b(const Product& p) {
  return p.trans_b ? p.k : p.n;
}

// A CBLAS library opened by name, kept open for the life of the program.
struct Cblas {
  void* handle = nullptr;
  using Fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                      float*, int);
  Fn sgemm = nullptr;
  std::string detail;

  explicit Cblas(const std::string& soname) {
    handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw std::runtime_error(fmt::format("{}: cannot open: {}", soname, dlerror()));
    sgemm = reinterpret_cast<Fn>(dlsym(handle, "cblas_sgemm"));
    if (sgemm == nullptr) throw std::runtime_error(fmt::format("{}: no cblas_sgemm", soname));
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"))) set(1);
    if (auto name = reinterpret_cast<const char* (*)()>(dlsym(handle, "openblas_get_corename")))
      detail = fmt::format("OpenBLAS kernels {}", name());
    if (auto set = reinterpret_cast<void (*)(std::int64_t)>(dlsym(handle, "bli_thread_set_num_threads")))
      set(1);
    auto arch_id = reinterpret_cast<int (*)()>(dlsym(handle, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(handle, "bli_arch_string"));
    if (arch_id != nullptr && arch_name != nullptr)
      detail = fmt::format("BLIS kernels {}", arch_name(arch_id()));
    if (auto set = reinterpret_cast<int (*)(int)>(dlsym(handle, "MKL_Set_Num_Threads_Local"))) set(1);
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(handle, "MKL_Set_Num_Threads"))) set(1);
  }

  Sgemm as_sgemm() const {
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    return [fn = sgemm](const Product& p, const float* a, const float* b, float* c) {
      fn(kRowMajor, p.trans_a ? kTrans : kNoTrans, p.trans_b ? kTrans : kNoTrans, p.m, p.n, p.k, 1.0f, a,
         ld_a(p), b, ld_b(p), 0.0f, c, p.n);
    };
  }
};

// The project's own product (kernels/cpu/gemm.hpp): A broadcast, B by rows, so B is never transposed.
Sgemm mnistdp_fn(mnistdp::cpu::Isa isa) {
  return [isa](const Product& p, const float* a, const float* b, float* c) {
    if (p.trans_b) throw std::runtime_error("not this product's form (B transposed)");
    mnistdp::cpu::Gemm g;
    g.m = p.m, g.n = p.n, g.k = p.k;
    g.a = a;
    g.a_row_stride = p.trans_a ? 1 : p.k;
    g.a_col_stride = p.trans_a ? p.m : 1;
    g.b = b, g.ldb = p.n, g.c = c, g.ldc = p.n;
    mnistdp::cpu::gemm(isa, g);
  };
}

#if defined(MNISTDP_SURVEY_DNNL)
Sgemm dnnl_sgemm_fn() {
  return [](const Product& p, const float* a, const float* b, float* c) {
    if (dnnl_sgemm(p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N', p.m, p.n, p.k, 1.0f, a, ld_a(p), b, ld_b(p),
                   0.0f, c, p.n) != dnnl_success)
      throw std::runtime_error("dnnl_sgemm failed");
  };
}
#endif

#if defined(MNISTDP_SURVEY_XSMM)
// libxsmm is column-major: the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, the same
// memory read with the operands swapped. A kernel is made (JIT) once per product and layout.
Sgemm xsmm_fn() {
  libxsmm_init();
  return [](const Product& p, const float* a, const float* b, float* c) {
    const libxsmm_blasint lda = ld_a(p), ldb = ld_b(p), ldc = p.n;
    const float alpha = 1.0f, beta = 0.0f;
    const int flags =
        (p.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (p.trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    const libxsmm_smmfunction kernel =
        libxsmm_smmdispatch(p.n, p.m, p.k, &ldb, &lda, &ldc, &alpha, &beta, &flags, nullptr);
    if (kernel == nullptr) throw std::runtime_error("libxsmm: no kernel for this layout");
    kernel(b, a, c);
  };
}
#endif

// Times `fn` in repeats of `calls` calls; microseconds per call.
Stats time_calls(const std::function<void()>& fn, int repeats) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 20; ++i)
    fn();
  long calls = 1;
  for (;;) {  // calibrate: one timing of about 20 ms
    const auto t0 = clock::now();
    for (long i = 0; i < calls; ++i)
      fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s > 0.02 || calls > (1L << 20)) break;
    calls *= 2;
  }
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    for (long i = 0; i < calls; ++i)
      fn();
    us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() /
                 static_cast<double>(calls));
  }
  return mnistdp::bench::summarize(us, calls);
}

// The largest |c - reference| over C, relative to the sum of |a||b| terms: a library with a wrong layout or a
// broken kernel is off by whole terms, a correct one by a few ulps.
double check(const Product& p, const Sgemm& fn, const Buffer& a, const Buffer& b) {
  Buffer c(static_cast<std::size_t>(p.m) * p.n, std::nanf(""));
  fn(p, a.data(), b.data(), c.data());
  double worst = 0.0;
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      for (int l = 0; l < p.k; ++l) {
        const double x =
            a[p.trans_a ? static_cast<std::size_t>(l) * p.m + i : static_cast<std::size_t>(i) * p.k + l];
        const double y =
            b[p.trans_b ? static_cast<std::size_t>(j) * p.k + l : static_cast<std::size_t>(l) * p.n + j];
        exact += x * y;
        magnitude += std::abs(x * y);
      }
      const double err = std::abs(c[static_cast<std::size_t>(i) * p.n + j] - exact) / (magnitude + 1e-30);
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  return worst;
}

// One core's single-precision peak: independent chains of vector FMAs, enough of them to hide the FMA
// latency, with nothing loaded from memory. The widest vectors the CPU has are used. Twelve named
// accumulators: an array here was kept in memory by the compiler, and the loads and stores, not the FMAs, set
// the pace.
#define MNISTDP_FMA_CHAINS(VEC, SET1, FMADD, ADD)                                                         \
  VEC c0 = SET1(0.f), c1 = SET1(1.f), c2 = SET1(2.f), c3 = SET1(3.f), c4 = SET1(4.f), c5 = SET1(5.f);     \
  VEC c6 = SET1(6.f), c7 = SET1(7.f), c8 = SET1(8.f), c9 = SET1(9.f), c10 = SET1(10.f), c11 = SET1(11.f); \
  const VEC a = SET1(0.999999f), b = SET1(1e-7f);                                                         \
  for (long it = 0; it < iterations; ++it) {                                                              \
    c0 = FMADD(c0, a, b), c1 = FMADD(c1, a, b), c2 = FMADD(c2, a, b), c3 = FMADD(c3, a, b);               \
    c4 = FMADD(c4, a, b), c5 = FMADD(c5, a, b), c6 = FMADD(c6, a, b), c7 = FMADD(c7, a, b);               \
    c8 = FMADD(c8, a, b), c9 = FMADD(c9, a, b), c10 = FMADD(c10, a, b), c11 = FMADD(c11, a, b);           \
  }                                                                                                       \
  const VEC sum = ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))),                  \
                      ADD(ADD(c8, c9), ADD(c10, c11)));

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  MNISTDP_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
  alignas(64) float lanes[16];  // (GCC 12 reports the lane-extracting intrinsics' undefined pass-through)
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  MNISTDP_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
  return _mm_cvtss_f32(_mm256_castps256_ps128(sum));
}

// GFLOP/s and the instruction set it was measured with.
std::pair<double, std::string> measured_peak() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return {0.0, "none"};
  const long iterations = 1L << 22;
  volatile float sink = 0.0f;
  const Stats s = time_calls(
      [&] { sink = sink + (avx512 ? fma_chains_avx512(iterations) : fma_chains_avx2(iterations)); }, 7);
  const double flops = 2.0 * 12.0 * (avx512 ? 16.0 : 8.0) * static_cast<double>(iterations);
  return {flops / (s.median * 1e3), avx512 ? "AVX-512 FMA" : "AVX2 FMA"};
}

// fc1's work in a step, as a step on each library would run it: the forward product with the bias and ReLU,
// and the weight gradient with a plain SGD step on w1 (what the lone CPU replica runs). cpu::gemm does each
// in one pass, the element-wise work in its epilogue; a library's product is followed by the passes it
// leaves, the bias and ReLU over hT [256, batch] and ref::sgd_step over w1 and its stored gradient.
struct Fc1Work {
  Stats forward;  // fc1.fwd (w1 xT, feature-major) + bias + ReLU
  Stats update;   // fc1.dW (dhT x) + SGD on w1
};

Fc1Work time_fc1_work(const Sgemm& sgemm, const mnistdp::cpu::Isa* own_isa, int batch, int repeats,
                      std::mt19937& rng) {
  const int in = 784, hidden = 256;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto random = [&](std::size_t n) {
    Buffer v(n);
    for (float& e : v)
      e = dist(rng);
    return v;
  };
  const std::size_t weights = static_cast<std::size_t>(hidden) * in;
  auto w1 = random(weights), grad = random(weights);
  const auto b1 = random(hidden), xT = random(static_cast<std::size_t>(in) * batch),
             x = random(static_cast<std::size_t>(batch) * in),
             dhT = random(static_cast<std::size_t>(hidden) * batch);
  Buffer hT(static_cast<std::size_t>(hidden) * batch);
  mnistdp::SgdConfig sgd;  // lr 0.01, no momentum
  const Product forward{"fm fc1.fwd w1.xT", hidden, batch, in, false, false};
  const Product gradient{"fm fc1.dW dHT.x", hidden, in, batch, false, false};
  Fc1Work work;
  if (own_isa != nullptr) {
    mnistdp::cpu::Gemm f;
    f.m = hidden, f.n = batch, f.k = in;
    f.a = w1.data(), f.a_row_stride = in, f.b = xT.data(), f.ldb = batch, f.c = hT.data(), f.ldc = batch;
    f.epilogue.row_bias = b1.data(), f.epilogue.activation = mnistdp::Activation::relu;
    work.forward = time_calls([&] { mnistdp::cpu::gemm(*own_isa, f); }, repeats);
    mnistdp::cpu::Gemm u;
    u.m = hidden, u.n = in, u.k = batch;
    u.a = dhT.data(), u.a_row_stride = batch, u.b = x.data(), u.ldb = in, u.c = grad.data(), u.ldc = in;
    u.epilogue.sgd_params = w1.data(), u.epilogue.sgd_stride = in, u.epilogue.sgd_lr = sgd.lr;
    work.update = time_calls([&] { mnistdp::cpu::gemm(*own_isa, u); }, repeats);
    return work;
  }
  work.forward = time_calls(
      [&] {
        sgemm(forward, w1.data(), xT.data(), hT.data());
        for (int i = 0; i < hidden; ++i)
          for (int j = 0; j < batch; ++j) {
            float& h = hT[static_cast<std::size_t>(i) * batch + j];
            h = std::max(h + b1[i], 0.0f);
          }
      },
      repeats);
  work.update = time_calls(
      [&] {
        sgemm(gradient, dhT.data(), x.data(), grad.data());
        mnistdp::ref::sgd_step(w1.data(), grad.data(), nullptr, weights, sgd, false);
      },
      repeats);
  return work;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"The five products of a CPU training step, timed in one matrix library, in every layout"};
  std::string library = "openblas";
  std::string mkl_path = "libmkl_rt.so.2";
  int repeats = 15;
  std::vector<int> batches{64, 32};
  std::string json_path;
  app.add_option("--library", library,
                 "openblas, blis, mkl, dnnl, xsmm, mnistdp (the best instruction set), mnistdp-avx2 or "
                 "mnistdp-portable")
      ->capture_default_str();
  app.add_option("--mkl", mkl_path, "MKL's runtime library, by name or path")->capture_default_str();
  app.add_option("--repeats", repeats, "Timings per product (the median is reported)")->capture_default_str();
  app.add_option("--batch", batches, "Rows per replica")->capture_default_str();
  app.add_option("--json", json_path, "Write every row here");
  bool peak_only = false;
  app.add_flag("--peak", peak_only, "Measure one core's peak only, and print it as JSON");
  CLI11_PARSE(app, argc, argv);
  if (peak_only) {
    const auto [peak, isa] = measured_peak();
    fmt::print("{}\n", nlohmann::json{{"peak_gflops", peak}, {"peak_isa", isa}}.dump());
    return 0;
  }

  Sgemm sgemm;
  std::optional<mnistdp::cpu::Isa> own_isa;  // cpu::gemm's, with its fused epilogues
  std::string detail;
  std::unique_ptr<Cblas> cblas;
  if (library == "openblas" || library == "blis" || library == "mkl") {
    cblas = std::make_unique<Cblas>(library == "openblas" ? "libopenblas.so.0"
                                    : library == "blis"   ? "libblis.so.4"
                                                          : mkl_path);
    sgemm = cblas->as_sgemm();
    detail = cblas->detail;
#if defined(MNISTDP_SURVEY_DNNL)
  } else if (library == "dnnl") {
    // One thread, as for every library: Debian's oneDNN runs on OpenMP, whose default is every core, and
    // OMP_NUM_THREADS is read once, when its runtime loads, before anything here could set it.
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
    const dnnl_version_t* v = dnnl_version();
    detail = fmt::format("oneDNN {}.{}.{}, ISA {}", v->major, v->minor, v->patch,
                         static_cast<int>(dnnl_get_effective_cpu_isa()));
    sgemm = dnnl_sgemm_fn();
#endif
#if defined(MNISTDP_SURVEY_XSMM)
  } else if (library == "xsmm") {
    sgemm = xsmm_fn();
    detail = fmt::format("libxsmm {}, target {}", LIBXSMM_VERSION, libxsmm_get_target_arch());
#endif
  } else if (library.starts_with("mnistdp")) {
    using mnistdp::cpu::Isa;
    const Isa isa = library == "mnistdp-avx2"       ? Isa::avx2
                    : library == "mnistdp-portable" ? Isa::portable
                                                    : mnistdp::cpu::best_isa();
    sgemm = mnistdp_fn(isa);
    own_isa = isa;
    detail = fmt::format("cpu::gemm, {}", mnistdp::cpu::isa_name(isa));
  } else {
    throw std::runtime_error(fmt::format("--library {}: not known or not built in", library));
  }

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  nlohmann::json rows = nlohmann::json::array();
  const auto [peak, peak_isa] = measured_peak();
  fmt::print("library: {} ({}); one core's peak: {:.1f} GFLOP/s ({})\n", library, detail, peak, peak_isa);
  fmt::print("{:<16} {:>5} {:>5} {:>5} {:>10} {:>8}  {}\n", "product", "m", "n", "k", "us", "GFLOP/s",
             "check");
  for (int batch : batches) {
    for (const Product& p : step_products(batch)) {
      Buffer a(static_cast<std::size_t>(p.m) * p.k), b(static_cast<std::size_t>(p.k) * p.n),
          c(static_cast<std::size_t>(p.m) * p.n);
      for (float& v : a)
        v = dist(rng);
      for (float& v : b)
        v = dist(rng);
      double error = 0.0;
      std::string status = "ok";
      try {
        error = check(p, sgemm, a, b);
      } catch (const std::exception& e) {
        status = e.what();
      }
      if (status == "ok" && !(error < 1e-5)) status = fmt::format("WRONG (relative error {:.2g})", error);
      if (status != "ok") {
        fmt::print("{:<16} {:>5} {:>5} {:>5} {:>10} {:>8}  {}\n", p.name, p.m, p.n, p.k, "-", "-", status);
        rows.push_back({{"product", p.name}, {"batch", batch}, {"status", status}});
        continue;
      }
      const Stats s = time_calls([&] { sgemm(p, a.data(), b.data(), c.data()); }, repeats);
      const double gflops = p.flops() / (s.median * 1e3);
      fmt::print("{:<16} {:>5} {:>5} {:>5} {:>10.2f} {:>8.1f}  ok ({:.1e})\n", p.name, p.m, p.n, p.k,
                 s.median, gflops, error);
      rows.push_back({{"product", p.name},
                      {"batch", batch},
                      {"m", p.m},
                      {"n", p.n},
                      {"k", p.k},
                      {"trans_a", p.trans_a},
                      {"trans_b", p.trans_b},
                      {"gflops", gflops},
                      {"status", "ok"},
                      {"time", mnistdp::bench::to_json(s)}});
    }
  }
  nlohmann::json fc1_rows = nlohmann::json::array();
  fmt::print("\nfc1 with its element-wise work ({}):\n{:<6} {:>22} {:>22} {:>8}\n",
             own_isa ? "fused into the product's epilogues" : "the product, then a pass of its own", "batch",
             "fwd + bias + ReLU us", "dW + SGD on w1 us", "sum us");
  for (int batch : batches) {
    const Fc1Work w = time_fc1_work(sgemm, own_isa ? &*own_isa : nullptr, batch, repeats, rng);
    fmt::print("{:<6} {:>22.2f} {:>22.2f} {:>8.2f}\n", batch, w.forward.median, w.update.median,
               w.forward.median + w.update.median);
    fc1_rows.push_back({{"batch", batch},
                        {"fused", own_isa.has_value()},
                        {"forward", mnistdp::bench::to_json(w.forward)},
                        {"update", mnistdp::bench::to_json(w.update)}});
  }
  if (!json_path.empty())
    mnistdp::bench::write_json(json_path, {{"library", library},
                                           {"fc1_work", fc1_rows},
                                           {"detail", detail},
                                           {"date", mnistdp::bench::utc_now()},
                                           {"load_average", mnistdp::bench::load_average()},
                                           {"peak_gflops", peak},
                                           {"peak_isa", peak_isa},
                                           {"rows", rows}});
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "mnist-dp-gemm-survey: {}\n", e.what());
  return 1;
}
