#pragma once
// What mnist-dp-bench's parts share: the options, a benchmark and its result, the ceilings, the checks
// against the reference, and the GEMM cases with the implementations each is timed in.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/bench_device.hpp"
#include "bench/epoch_bench.hpp"
#include "host/cuda/cuda_step.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/gemm/gemm.hpp"
#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "kernels/ref/gather.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/sgd.hpp"
#include "kernels/ref/softmax_xent.hpp"

namespace mnistdp::bench {

inline constexpr const char* kProgram = "mnist-dp-bench";
inline constexpr int kIn = ParamLayout::kInput;
inline constexpr int kHid = ParamLayout::kHidden;
inline constexpr int kOut = ParamLayout::kClasses;
inline constexpr int kGlobalBatch = 64;
inline constexpr int kTrainImages = 60000;
inline constexpr std::size_t kAlign =
    64;  // floats: every operand of a buffer set starts on a 256-byte boundary

inline std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
inline std::size_t sz(long n) {
  return static_cast<std::size_t>(n);
}

struct Options {
  bool quick = false;
  bool list = false;
  std::string filter;
  std::string json_path;
  int device = 0;
  int repeats = 0;  // 0: 25, or 7 with --quick (10 epochs with --epoch)
  bool epoch = false;
  std::string epoch_gemm = "blocked";
  int rounds = 3;
  int epoch_steps = 0;      // with --epoch: at most this many steps an epoch; 0: every step
  bool check_only = false;  // check and launch everything, time nothing (kCheckOnlyTiming)
};

// What one launch of an operation does, counted by hand: floating-point operations, the bytes it must move at
// the least (each operand read once, each result written once), and the kernel launches it takes.
struct Work {
  double flops = 0.0;
  double bytes = 0.0;
  int launches = 1;
  Work& operator+=(const Work& o) {
    flops += o.flops;
    bytes += o.bytes;
    launches += o.launches;
    return *this;
  }
};

// The outcome of comparing a device result with the reference.
struct Check {
  bool ok = true;
  double ratio = 0.0;  // the largest |device - reference| / tolerance over the elements checked (<= 1 passes)
  std::string detail;  // where it failed
  std::size_t bad = 0;  // the index of the first element out of tolerance
};

// One benchmark: an operation in one implementation, with its check and its launches.
struct Bench {
  Bench(std::string g, std::string o, std::string i, std::string s)
      : group(std::move(g)), op(std::move(o)), impl(std::move(i)), shape(std::move(s)) {}

  std::string group;  // "train-b64", "sweep", "kernel", "step-b64"
  std::string op;     // "fc1.fwd"
  std::string impl;   // "blocked"
  std::string shape;  // for people: "64x784 -> 256"
  Work work;
  std::function<Check()> validate;
  LaunchFn hot;   // on buffer set 0 every time
  LaunchFn cold;  // rotating through buffer sets larger than twice the L2; empty when there are none
  bool graph = false;
  int sets = 1;

  std::string id() const { return group + "/" + op + "/" + impl; }
};

struct Result {
  explicit Result(const Bench& b)
      : group(b.group), op(b.op), impl(b.impl), shape(b.shape), work(b.work), cold_sets(b.sets) {}

  std::string group, op, impl, shape;
  Work work;
  std::string check = "ok";
  double error_ratio = 0.0;
  int cold_sets = 1;
  std::optional<Stats> hot, cold, graph;
  std::vector<std::string> launched;  // the modes launched after the check ("hot", "cold", "graph")
};

struct Ceilings {
  int sgemm_n = 0;
  Stats sgemm;
  double sgemm_gflops = 0.0;
  std::size_t copy_bytes = 0;
  Stats copy;
  double copy_gbs = 0.0;  // bytes read + bytes written per second, as the rows count them
  Stats empty_stream;
  Stats empty_graph;
  Stats empty_sync;  // host clock: launch, then cudaStreamSynchronize
  // A grid-wide barrier of a persistent kernel (one block per SM): the time of a launch that crosses
  // kGridBarriers of them, per barrier.
  Stats grid_barrier;
  int grid_barrier_blocks = 0;
  std::string grid_barrier_error;  // why it was not measured, if it was not
};

inline constexpr int kGridBarriers = 1000;
// The ceilings' sizes in a check-only run: each path launched, at a size that takes an emulated device
// moments (the figures are thrown away).
inline constexpr int kCheckOnlySgemm = 64;
inline constexpr std::size_t kCheckOnlyCopyBytes = std::size_t{1} << 20;
inline constexpr int kCheckOnlyGridBarriers = 2;

// ------------------------------------------------------------------------------------------------ checks

// A float is within tolerance of the reference; a NaN matches only a NaN.
inline bool close(float got, float want, double tol, double& ratio) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  const double err = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  if (tol > 0.0)
    ratio = std::max(ratio, err / tol);
  else if (err > 0.0)
    ratio = std::numeric_limits<double>::infinity();
  return err <= tol;
}

// got and want: [n]; tol(i) the tolerance of element i.
inline Check compare(const float* got, const float* want, std::size_t n,
                     const std::function<double(std::size_t)>& tol, const char* what) {
  Check c;
  for (std::size_t i = 0; i < n; ++i) {
    if (!close(got[i], want[i], tol(i), c.ratio) && c.ok) {
      c.ok = false;
      c.bad = i;
      c.detail = fmt::format("{}[{}] = {} where the reference has {}", what, i, got[i], want[i]);
    }
  }
  return c;
}

inline Check merge(Check a, const Check& b) {
  a.ratio = std::max(a.ratio, b.ratio);
  if (a.ok && !b.ok) {
    a.ok = false;
    a.detail = b.detail;
  }
  return a;
}

// Copies for the checks, synchronised with the whole device: the benchmarks launch on a non-blocking stream,
// which a plain cudaMemcpy (on the legacy default stream) does not wait for, and a copy from pageable memory
// may return before its data has reached the device.
template <typename T>
inline std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (n) CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
inline void to_device(T* device, const std::vector<T>& host) {
  CUDA_CHECK(cudaDeviceSynchronize());
  if (!host.empty())
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Runs body(first, last) over [0, n) in pieces on the host's cores: the reference is plain loops, and the
// sweep's large products would take minutes on one core.
inline void parallel_for(int n, const std::function<void(int, int)>& body) {
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 32);
  const int per = std::max(1, (n + threads - 1) / threads);
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex m;
  for (int first = 0; first < n; first += per) {
    const int last = std::min(n, first + per);
    pool.emplace_back([&, first, last] {
      try {
        body(first, last);
      } catch (...) {
        const std::lock_guard lock(m);
        error = std::current_exception();
      }
    });
  }
  for (auto& t : pool)
    t.join();
  if (error) std::rethrow_exception(error);
}

// --------------------------------------------------------------------------------------------- GEMM cases

// The three orientations of a linear layer's products (kernels/cuda/ops/linear.cu):
//   fwd  C[m, n] = A[m, k] B[n, k]^T   (+ bias, ReLU)      y  = x w^T + b
//   dw   C[m, n] = A[k, m]^T B[k, n]                       dw = dy^T x
//   dx   C[m, n] = A[m, k] B[k, n]     (x ReLU mask)       dx = dy w
enum class Orient { fwd, dw, dx };

struct GemmCase {
  std::string group;
  std::string op;
  Orient orient = Orient::fwd;
  int m = 0, n = 0, k = 0;
  bool bias = false, relu = false, mask = false;
  bool timed_hot = true;  // training shapes: hot, cold and graph; the sweep: cold only
  bool timed_graph = true;

  bool epilogue() const { return bias || relu || mask; }
  std::size_t a_count() const { return sz(m) * sz(k); }
  std::size_t b_count() const { return sz(k) * sz(n); }
  std::size_t c_count() const { return sz(m) * sz(n); }
  std::string shape() const {
    switch (orient) {
      case Orient::fwd:
        return fmt::format("{}x{} -> {}{}", m, k, n, relu ? " +b relu" : " +b");
      case Orient::dw:
        return fmt::format("dW {}x{} over {}", m, n, k);
      case Orient::dx:
        return fmt::format("dX {}x{} from {}{}", m, n, k, mask ? " mask" : "");
    }
    return {};
  }
  Work work(bool with_epilogue) const {
    Work w;
    w.flops = 2.0 * m * n * static_cast<double>(k);
    std::size_t floats = a_count() + b_count() + c_count();
    if (with_epilogue && bias) floats += sz(n);
    if (with_epilogue && mask) floats += c_count();
    w.bytes = 4.0 * static_cast<double>(floats);
    return w;
  }
};

// One buffer set of a GEMM case: every operand, each aligned, in one slab of `sets` such sets.
struct GemmBuffers {
  std::size_t a = 0, b = 0, c = 0, bias = 0, mask = 0, stride = 0;  // offsets in floats
  int sets = 1;
  DeviceBuffer<float> slab;

  // max_sets: at most this many sets (a check-only run, which times nothing, rotates over 2).
  GemmBuffers(const GemmCase& g, std::size_t l2, bool rotate, int max_sets) {
    std::size_t at = 0;
    a = at;
    at += align_up(g.a_count());
    b = at;
    at += align_up(g.b_count());
    c = at;
    at += align_up(g.c_count());
    bias = at;
    at += align_up(sz(g.n));
    mask = at;
    at += g.mask ? align_up(g.c_count()) : 0;
    stride = at;
    const std::size_t set_bytes = stride * sizeof(float);
    if (rotate && set_bytes < 2 * l2) {
      // Enough sets that the working set is twice the L2 (at most 1 GiB in all).
      const std::size_t want = (2 * l2 + set_bytes - 1) / set_bytes;
      sets = static_cast<int>(std::min<std::size_t>(want, (std::size_t{1} << 30) / set_bytes));
      sets = std::clamp(sets, 1, max_sets);
    }
    slab = DeviceBuffer<float>(stride * sz(sets));
  }

  cuda::GemmProblem problem(const GemmCase& g, int set, bool with_epilogue) {
    float* base = slab.data() + stride * sz(set);
    cuda::GemmProblem p;
    p.m = g.m;
    p.n = g.n;
    p.k = g.k;
    p.a = base + a;
    p.b = base + b;
    p.c = base + c;
    p.ldc = g.n;
    switch (g.orient) {
      case Orient::fwd:
        p.lda = g.k;
        p.ldb = g.k;
        p.trans_b = true;
        break;
      case Orient::dw:
        p.lda = g.m;
        p.trans_a = true;
        p.ldb = g.n;
        break;
      case Orient::dx:
        p.lda = g.k;
        p.ldb = g.n;
        break;
    }
    if (with_epilogue) {
      p.bias = g.bias ? base + bias : nullptr;
      p.activation = g.relu || g.mask ? Activation::relu : Activation::identity;
      p.mask = g.mask ? base + mask : nullptr;
    }
    return p;
  }
};

// The reference of a GEMM case on the rows of C it checks (all of them, or three slices of a large C),
// computed with ref::linear_forward / ref::linear_backward on the host copies of buffer set 0.
struct GemmReference {
  std::vector<int> rows;     // the rows of C checked
  std::vector<float> value;  // [rows, n]
  std::vector<float> tol;    // [rows, n]
};

class GemmCheck {
 public:
  // From the operands of buffer set 0 on the device.
  GemmCheck(const GemmCase& g, GemmBuffers& buf)
      : GemmCheck(g, to_host(buf.slab.data() + buf.a, g.a_count()),
                  to_host(buf.slab.data() + buf.b, g.b_count()), to_host(buf.slab.data() + buf.bias, sz(g.n)),
                  g.mask ? to_host(buf.slab.data() + buf.mask, g.c_count()) : std::vector<float>{}) {}

  // From host operands: a [a_count], b [b_count], bias [n], mask [m, n] (or empty without a mask).
  GemmCheck(const GemmCase& g, std::vector<float> a, std::vector<float> b, std::vector<float> bias,
            std::vector<float> mask)
      : g_(g), a_(std::move(a)), b_(std::move(b)), bias_(std::move(bias)), mask_(std::move(mask)) {
    // Rows checked: every row while the reference is cheap, else 32 at the top, middle and bottom of C (every
    // column is checked, and the first, a middle and the last row tiles of every version).
    const double fma = static_cast<double>(g.m) * g.n * static_cast<double>(g.k);
    if (fma <= 3e8 || g.m <= 96) {
      for (int r = 0; r < g.m; ++r)
        rows_.push_back(r);
    } else {
      for (int start : {0, g.m / 2 - 16, g.m - 32})
        for (int r = start; r < start + 32; ++r)
          rows_.push_back(r);
    }
  }

  // device_c: C of buffer set 0 after one launch.
  Check operator()(const float* device_c, bool with_epilogue) {
    std::vector<float> got(rows_.size() * sz(g_.n));
    CUDA_CHECK(cudaDeviceSynchronize());
    for (std::size_t i = 0; i < rows_.size(); ++i)
      CUDA_CHECK(cudaMemcpy(got.data() + i * sz(g_.n), device_c + sz(rows_[i]) * sz(g_.n),
                            sz(g_.n) * sizeof(float), cudaMemcpyDeviceToHost));
    return check_rows(got, with_epilogue);
  }

  // got: [rows(), n], the rows of C that rows() names, in that order.
  Check check_rows(const std::vector<float>& got, bool with_epilogue) {
    std::optional<GemmReference>& ref = with_epilogue ? with_ : without_;
    if (!ref) ref = compute(with_epilogue);
    Check c = compare(
        got.data(), ref->value.data(), got.size(), [&](std::size_t i) { return ref->tol[i]; }, "C");
    if (!c.ok) {
      // Name the row and column of C rather than the index among the rows checked.
      const std::size_t row = sz(rows_[c.bad / sz(g_.n)]), col = c.bad % sz(g_.n);
      c.detail = fmt::format("C[{}, {}] = {} where the reference has {} (tolerance {:.3g})", row, col,
                             got[c.bad], ref->value[c.bad], ref->tol[c.bad]);
    }
    return c;
  }

  const std::vector<int>& rows() const { return rows_; }

 private:
  // op(A)[i, j] and op(B)[i, j] of the case, from the host copies.
  float op_a(int i, int j) const {
    return g_.orient == Orient::dw ? a_[sz(j) * sz(g_.m) + sz(i)] : a_[sz(i) * sz(g_.k) + sz(j)];
  }
  float op_b(int i, int j) const {
    return g_.orient == Orient::fwd ? b_[sz(j) * sz(g_.k) + sz(i)] : b_[sz(i) * sz(g_.n) + sz(j)];
  }

  GemmReference compute(bool with_epilogue) const {
    const int n = g_.n, k = g_.k;
    const bool bias = with_epilogue && g_.bias;
    const bool relu = with_epilogue && g_.relu;
    const bool mask = with_epilogue && g_.mask;
    GemmReference r;
    r.rows = rows_;
    r.value.resize(rows_.size() * sz(n));
    r.tol.resize(rows_.size() * sz(n));
    const std::vector<float> zero_bias(sz(n), 0.0f);
    const float* b_vec = bias ? bias_.data() : zero_bias.data();
    // The rows come in runs of consecutive indices; each run is one call of the reference on a slice of C.
    std::vector<std::pair<int, int>> runs;  // [first row, row count) and the index of its first in rows_
    std::vector<int> run_at;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (i == 0 || rows_[i] != rows_[i - 1] + 1) {
        runs.push_back({rows_[i], 0});
        run_at.push_back(static_cast<int>(i));
      }
      ++runs.back().second;
    }
    // Split the runs into pieces of at most 8 rows, computed in parallel.
    struct Piece {
      int row, count, at;
    };
    std::vector<Piece> pieces;
    for (std::size_t j = 0; j < runs.size(); ++j)
      for (int off = 0; off < runs[j].second; off += 8)
        pieces.push_back({runs[j].first + off, std::min(8, runs[j].second - off), run_at[j] + off});
    parallel_for(static_cast<int>(pieces.size()), [&](int first, int last) {
      std::vector<float> dw_tmp, db_tmp, a_sub, x_rows;
      for (int p = first; p < last; ++p) {
        const Piece& piece = pieces[sz(p)];
        float* out = r.value.data() + sz(piece.at) * sz(n);
        switch (g_.orient) {
          case Orient::fwd:
            ref::linear_forward(a_.data() + sz(piece.row) * sz(k), b_.data(), b_vec, out, {piece.count, k, n},
                                relu ? Activation::relu : Activation::identity);
            break;
          case Orient::dw: {
            // Rows of dW are columns of dy: gather them into a compact [k, count] dy.
            a_sub.resize(sz(k) * sz(piece.count));
            for (int kk = 0; kk < k; ++kk)
              for (int c = 0; c < piece.count; ++c)
                a_sub[sz(kk) * sz(piece.count) + sz(c)] = a_[sz(kk) * sz(g_.m) + sz(piece.row + c)];
            db_tmp.resize(sz(piece.count));
            ref::linear_backward(a_sub.data(), b_.data(), nullptr, out, db_tmp.data(), nullptr,
                                 {k, n, piece.count}, Activation::identity);
            break;
          }
          case Orient::dx: {
            const float* x = nullptr;
            if (g_.mask) {
              x = mask_.data() + sz(piece.row) * sz(n);
            } else {
              x_rows.assign(sz(piece.count) * sz(n), 1.0f);  // no mask: any x will do (relu_mask is false)
              x = x_rows.data();
            }
            dw_tmp.resize(sz(k) * sz(n));
            db_tmp.resize(sz(k));
            ref::linear_backward(a_.data() + sz(piece.row) * sz(k), x, b_.data(), dw_tmp.data(),
                                 db_tmp.data(), out, {piece.count, n, k},
                                 mask ? Activation::relu : Activation::identity);
            break;
          }
        }
      }
    });
    // Tolerance of C[i, j]: both the reference and the device sum k products in float, each within
    // (k + 2) eps sum_l |op(A)[i, l]| |op(B)[l, j]| of the exact value (plus the bias's rounding); that sum
    // is bounded by rowabs_i * colmax_j, cheap to compute. Twice that bounds their difference. A wrong index
    // or a missing tile is off by a whole term, far outside it.
    std::vector<double> colmax(sz(n), 0.0);
    for (int l = 0; l < k; ++l)
      for (int j = 0; j < n; ++j)
        colmax[sz(j)] = std::max(colmax[sz(j)], static_cast<double>(std::fabs(op_b(l, j))));
    const double eps = std::numeric_limits<float>::epsilon();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      double rowabs = 0.0;
      for (int l = 0; l < k; ++l)
        rowabs += std::fabs(op_a(rows_[i], l));
      for (int j = 0; j < n; ++j)
        r.tol[i * sz(n) + sz(j)] = static_cast<float>(
            2.0 * (k + 2) * eps * (rowabs * colmax[sz(j)] + (bias ? std::fabs(bias_[sz(j)]) : 0.0)) + 1e-30);
    }
    return r;
  }

  GemmCase g_;
  std::vector<float> a_, b_, bias_, mask_;
  std::vector<int> rows_;
  std::optional<GemmReference> with_, without_;
};

// The implementations timed: the project's three versions and cuBLAS through the project's launcher
// (cublasSgemm, then the epilogue as its own kernel), plus cublasSgemm alone where there is an epilogue (the
// product only: what cuBLAS costs without the work the custom kernels fuse in).
struct ImplChoice {
  std::string name;
  GemmImpl impl;
  bool epilogue;
};

// The whole-step benchmarks: every GEMM, and the fused classifier head with the hand-written GEMMs it
// matches that are candidates for the fast path.
struct StepVariant {
  GemmImpl impl;
  bool fused_head;
  bool fused_step = false;    // the fused step's three kernels (its GEMM is v4's tiling, whatever impl says)
  bool programmatic = false;  // the fused step with programmatic dependent launch
  bool persistent = false;    // the fused step as the persistent kernel, one step a launch
  std::string name() const {
    if (persistent) return "persistent";
    if (fused_step) return programmatic ? "fused-step+pdl" : "fused-step";
    return std::string(gemm_impl_name(impl)) + (fused_head ? "+head" : "");
  }
};
// Every GEMM version's plain step (kGemmVersions, kernels/cuda/gemm/gemm_version.hpp), then the fused ones.
inline const std::vector<StepVariant> kStepVariants = [] {
  std::vector<StepVariant> v;
  for (const GemmEntry& version : kGemmVersions)
    v.push_back({version.impl, false});
  v.insert(v.end(), {{GemmImpl::blocked, true},
                     {GemmImpl::slab, true},
                     {GemmImpl::slab, true, true},
                     {GemmImpl::slab, true, true, true},
                     {GemmImpl::slab, true, true, false, true}});
  return v;
}();

inline std::vector<ImplChoice> impls_for(const GemmCase& g) {
  std::vector<ImplChoice> v;
  for (const GemmEntry& version : kGemmVersions) {
    // A library's product takes its epilogue as a kernel of its own: timed with it, and without it.
    const bool separate_epilogue = version.needs_cublas && g.epilogue();
    v.push_back({std::string(version.name) + (separate_epilogue ? "+epi" : ""), version.impl, true});
    if (separate_epilogue) v.push_back({std::string(version.name) + "-only", version.impl, false});
  }
  return v;
}

// The GEMM cases of one per-replica batch: the products a step runs.
inline std::vector<GemmCase> training_gemms(int batch) {
  const std::string group = fmt::format("train-b{}", batch);
  return {
      {group, "fc1.fwd", Orient::fwd, batch, kHid, kIn, true, true, false, true, true},
      {group, "fc2.fwd", Orient::fwd, batch, kOut, kHid, true, false, false, true, true},
      {group, "fc2.dW", Orient::dw, kOut, kHid, batch, false, false, false, true, true},
      {group, "fc2.dX", Orient::dx, batch, kHid, kOut, false, false, true, true, true},
      {group, "fc1.dW", Orient::dw, kHid, kIn, batch, false, false, false, true, true},
  };
}

// Larger problems, where the versions' differences in data reuse show: square ones in the three orientations,
// and fc1 at large batches (what data parallelism pays for).
inline std::vector<GemmCase> sweep_gemms(bool quick) {
  std::vector<GemmCase> cases;
  const std::vector<int> squares =
      quick ? std::vector<int>{512, 2048} : std::vector<int>{256, 512, 1024, 2048, 4096};
  for (const int s : squares) {
    cases.push_back(
        {"sweep", fmt::format("fwd-{}", s), Orient::fwd, s, s, s, true, true, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("dW-{}", s), Orient::dw, s, s, s, false, false, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("dX-{}", s), Orient::dx, s, s, s, false, false, true, false, false});
  }
  const std::vector<int> batches = quick ? std::vector<int>{4096} : std::vector<int>{1024, 16384};
  for (const int b : batches) {
    cases.push_back(
        {"sweep", fmt::format("fc1.fwd-b{}", b), Orient::fwd, b, kHid, kIn, true, true, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("fc1.dW-b{}", b), Orient::dw, kHid, kIn, b, false, false, false, false, false});
  }
  return cases;
}

}  // namespace mnistdp::bench
